// k6 load test of Floodgate's HTTP API: the lesson's scenario (50 virtual
// users, 200 requests per second for 30 seconds) against POST /v1/check.
//
//   k6 run --address 127.0.0.1:6565 loadtest/check.js
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e LIMIT=100 -e WINDOW_S=60 loadtest/check.js
//
// Every setting comes from an environment variable (-e NAME=value); see
// loadtest/README.md. The run fails (k6 exits non-zero) when a threshold
// is crossed: the share of 429s is not the one the limit implies, an
// identity was admitted more than the limit in one window, an answer was
// degraded (taken by the service's fallback, not the shared count) or
// carried inconsistent X-RateLimit-* headers, the p99 latency is too
// high, requests fail, none was made, or the service cannot keep up. A
// setting out of range stops the script before the run, naming it.

import http from 'k6/http';
import { check, fail, sleep } from 'k6';
import exec from 'k6/execution';
import { Counter, Rate } from 'k6/metrics';

// problems collects every setting refused; the script stops before the
// run when there is any, listing them all.
const problems = [];

// setting returns the environment variable name as a number in
// [min, max] (a whole one when whole), or def when it is unset; a value
// that is not is recorded in problems and def returned in its place.
function setting(name, def, { min, max = Infinity, whole = false, above = false }) {
  const raw = __ENV[name];
  if (raw === undefined || raw === '') {
    return def;
  }
  const v = Number(raw);
  const kind = whole ? 'a whole number' : 'a number';
  const range = max === Infinity ? `${above ? 'above' : 'at least'} ${min}` : `${above ? 'above' : 'from'} ${min} ${above ? 'up to' : 'to'} ${max}`;
  if (raw.trim() === '' || !Number.isFinite(v) || (whole && !Number.isInteger(v)) || v < min || (above && v === min) || v > max) {
    problems.push(`${name}=${raw}: want ${kind} ${range}`);
    return def;
  }
  return v;
}

const BASE_URL = (__ENV.BASE_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '');
const POLICY = __ENV.POLICY || 'api';
const DIMENSION = __ENV.DIMENSION || 'user';
const RATE = setting('RATE', 200, { min: 1, whole: true }); // requests per second
const DURATION_S = setting('DURATION_S', 30, { min: 1, whole: true });
const VUS = setting('VUS', 50, { min: 1, whole: true });
const USERS = setting('USERS', 50, { min: 1, whole: true }); // distinct identities
const LIMIT = setting('LIMIT', 100, { min: 1, whole: true }); // the policy's limit per identity...
const WINDOW_S = setting('WINDOW_S', 60, { min: 0, above: true }); // ...per this many seconds
const BURST = setting('BURST', LIMIT, { min: 1, whole: true }); // token_bucket, gcra
const TOLERANCE = setting('TOLERANCE', 0.05, { min: 0, max: 1 }); // allowed gap in the 429 ratio
const P99_MS = setting('P99_MS', 50, { min: 0, above: true });
const ALGORITHMS = ['fixed_window', 'sliding_window', 'sliding_log', 'token_bucket', 'gcra', 'leaky_bucket'];
const ALGORITHM = __ENV.ALGORITHM || 'sliding_window';
if (!ALGORITHMS.includes(ALGORITHM)) {
  problems.push(`ALGORITHM=${ALGORITHM}: want one of ${ALGORITHMS.join(', ')}`);
}
// The window algorithms admit at most LIMIT in each window Floodgate
// counts in (windows starting at multiples of WINDOW_S since the Unix
// epoch); the buckets admit a burst and then a steady refill.
const WINDOWED = ['fixed_window', 'sliding_window', 'sliding_log'].includes(ALGORITHM);
const EXPECTED_RATIO_SET = __ENV.EXPECTED_429_RATIO !== undefined && __ENV.EXPECTED_429_RATIO !== '';
// RUN_ID prefixes every identity. The default, a fresh prefix per run so
// that every run starts with fresh counters, is chosen once in setup():
// init code runs once per VU, and each VU would pick its own.
const RUN_ID = __ENV.RUN_ID || '';
for (const name of ['ALIGN', 'EXACT']) {
  if (__ENV[name] !== undefined && !['true', 'false', ''].includes(__ENV[name])) {
    problems.push(`${name}=${__ENV[name]}: want true or false`);
  }
}
const ALIGN = __ENV.ALIGN !== 'false';
// The exact check counts each identity's admissions in each window, with
// the windows of a run that ALIGN placed; it needs a window algorithm.
const EXACT = __ENV.EXACT !== 'false' && ALIGN && WINDOWED && !EXPECTED_RATIO_SET;
// MARGIN_MS: admissions this close to a window boundary, by this
// machine's clock, are left out of the exact count, so that a clock a
// little off the service's does not put them in the wrong window.
const MARGIN_MS = setting('MARGIN_MS', 100, { min: 0 });

// The runs ALIGN places: one that ends (with SLACK_S for k6 to start the
// scenario) in the window it starts in runs at once; a longer one waits
// for the next window to start and runs from its boundary. The expected
// share below is for such a run; any other start would span other
// windows (one mid-window run of fw 20/10s for 20 s spans 3 windows and
// admitted 60, where 2 admit 40).
const SLACK_S = 2;
const WITHIN_ONE = DURATION_S + SLACK_S <= WINDOW_S;
// Windows the run's exact check watches: the ones a run from a boundary
// (or within one window) reaches, with its slack.
const WINDOWS = WITHIN_ONE ? 1 : Math.ceil((DURATION_S + SLACK_S) / WINDOW_S);
const MAX_SLOTS = 1000; // identities x windows the exact check declares at most

// The share of 429s an exact limiter gives: each identity gets
// RATE*DURATION_S/USERS requests, spread evenly. A window algorithm
// admits in each window of the run at most LIMIT of the requests in it
// (fixed_window and sliding_log: the first LIMIT; sliding_window, after
// a full window, about LIMIT per window pro rata, as the last window's
// count weighs less); a bucket admits BURST and then LIMIT per WINDOW_S.
// These are estimates (± a request per identity and window);
// `floodgate loadtest --expect-algorithm` replays every request through
// Floodgate's own step function instead. EXPECTED_429_RATIO overrides
// the estimate (and skips the wait).
function expected429Ratio() {
  if (EXPECTED_RATIO_SET) {
    return setting('EXPECTED_429_RATIO', 0, { min: 0, max: 1 });
  }
  const perSecond = RATE / USERS; // per identity
  const perUser = perSecond * DURATION_S;
  let allowed = 0;
  if (!WINDOWED) {
    allowed = Math.min(perUser, BURST + (LIMIT * DURATION_S) / WINDOW_S);
  } else if (WITHIN_ONE) {
    allowed = Math.min(perUser, LIMIT);
  } else {
    for (let from = 0; from < DURATION_S; from += WINDOW_S) {
      const length = Math.min(WINDOW_S, DURATION_S - from);
      const cap = from > 0 && ALGORITHM === 'sliding_window' ? (LIMIT * length) / WINDOW_S : LIMIT;
      allowed += Math.min(perSecond * length, cap);
    }
  }
  return allowed >= perUser ? 0 : 1 - allowed / perUser;
}

const EXPECTED = expected429Ratio();
const LOW = Math.max(0, EXPECTED - TOLERANCE);
const HIGH = Math.min(1, EXPECTED + TOLERANCE);

const rateLimited = new Rate('rate_limited'); // share of checks answered 429
const unexpected = new Counter('unexpected_status'); // neither 200 nor 429
const degraded = new Rate('degraded'); // answers marked X-Floodgate-Degraded
const answered = new Counter('answered'); // checks answered 200 or 429
// admitted counts the checks answered 200, tagged slot=IDENTITY_WINDOW
// (EXACT): each slot's threshold fails when an identity was admitted more
// than LIMIT in one window.
const admitted = new Counter('admitted');

// 429 is an expected answer, not a failed request.
http.setResponseCallback(http.expectedStatuses(200, 429));

const thresholds = {
  rate_limited: [`rate>=${LOW.toFixed(4)}`, `rate<=${HIGH.toFixed(4)}`],
  unexpected_status: ['count==0'],
  degraded: ['rate==0'],
  answered: ['count>0'],
  http_req_failed: ['rate<0.01'],
  http_req_duration: [`p(99)<${P99_MS}`],
  checks: ['rate>0.99'],
  // The service kept up: at most 1% of the scheduled checks never started.
  dropped_iterations: [`count<=${Math.ceil(RATE * DURATION_S * 0.01)}`],
};
const SLOTS = EXACT && USERS * WINDOWS <= MAX_SLOTS;
if (SLOTS) {
  for (let u = 0; u < USERS; u++) {
    for (let w = 0; w < WINDOWS; w++) {
      thresholds[`admitted{slot:${u}_${w}}`] = [`count<=${LIMIT}`];
    }
  }
}

if (problems.length > 0) {
  // Before k6 reads the options: a RATE of 0.5 used to stop it with
  // "json: cannot unmarshal".
  throw new Error(`loadtest/check.js: ${problems.join('; ')} (see loadtest/README.md)`);
}

export const options = {
  // setup() may wait up to a window for the next one to start.
  setupTimeout: `${Math.ceil(WINDOW_S) + 30}s`,
  scenarios: {
    check: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: `${DURATION_S}s`,
      preAllocatedVUs: VUS,
      maxVUs: VUS,
    },
  },
  thresholds,
};

const params = { headers: { 'Content-Type': 'application/json' }, tags: { name: 'check' } };

function checkOnce(identity) {
  const body = JSON.stringify({ policy: POLICY, identity: { [DIMENSION]: identity }, cost: 1 });
  return http.post(`${BASE_URL}/v1/check?enforce=1`, body, params);
}

export function setup() {
  const runId = RUN_ID || `k6${Date.now().toString(36)}`;
  const res = checkOnce(`${runId}-setup`);
  if (res.status === 0) {
    fail(`POST ${BASE_URL}/v1/check got no answer: ${res.error}; is floodgate serve running at BASE_URL?`);
  }
  if (res.status !== 200 && res.status !== 429) {
    fail(`POST ${BASE_URL}/v1/check answered ${res.status}: ${res.body}; is floodgate serve running with policy "${POLICY}"?`);
  }
  const exact = EXACT ? (SLOTS ? `, at most ${LIMIT} admitted per identity and window` : ` (no per-window count: ${USERS} identities x ${WINDOWS} windows is more than ${MAX_SLOTS})`) : '';
  console.log(`identities ${runId}-0..${USERS - 1}; ${ALGORITHM} ${LIMIT}/${WINDOW_S}s: expected 429 ratio ${(100 * EXPECTED).toFixed(1)}% (accepting ${(100 * LOW).toFixed(1)}%..${(100 * HIGH).toFixed(1)}%)${exact}`);
  let into = (Date.now() / 1000) % WINDOW_S;
  if (ALIGN && !EXPECTED_RATIO_SET && (!WITHIN_ONE || into + DURATION_S + SLACK_S > WINDOW_S)) {
    const wait = WINDOW_S - into + 0.2;
    console.log(`waiting ${wait.toFixed(1)} s for the next ${WINDOW_S} s window to start, so that the run ${WITHIN_ONE ? 'lies within one' : 'starts on its boundary'} (ALIGN=false skips this)`);
    sleep(wait);
    into = (Date.now() / 1000) % WINDOW_S;
  }
  // The window the run starts in, by this machine's clock, in seconds
  // since the epoch: the exact check's window 0.
  return { runId, window0: Date.now() / 1000 - into };
}

// slotOf returns the exact check's window of a check sent at sent and
// answered at done (ms since the epoch), or -1 when the check may belong
// to either of two windows: it straddled a boundary, or came within
// MARGIN_MS of one.
function slotOf(window0, sent, done) {
  const w = Math.floor((sent / 1000 - window0) / WINDOW_S);
  const boundaryAfter = (window0 + (w + 1) * WINDOW_S) * 1000;
  const boundaryBefore = boundaryAfter - WINDOW_S * 1000;
  if (done + MARGIN_MS >= boundaryAfter || sent - MARGIN_MS < boundaryBefore) {
    return -1;
  }
  return w;
}

export default function (data) {
  const n = exec.scenario.iterationInTest % USERS;
  const sent = Date.now();
  const res = checkOnce(`${data.runId}-${n}`);
  const done = Date.now();
  const limited = res.status === 429;
  if (res.status !== 200 && !limited) {
    unexpected.add(1);
    return;
  }
  answered.add(1);
  rateLimited.add(limited);
  degraded.add(res.headers['X-Floodgate-Degraded'] !== undefined);
  if (!limited && SLOTS) {
    const w = slotOf(data.window0, sent, done);
    if (w >= 0) {
      admitted.add(1, { slot: `${n}_${w}` });
    }
  }
  const limitHeader = res.headers['X-Ratelimit-Limit'];
  const remaining = res.headers['X-Ratelimit-Remaining'];
  check(res, {
    'status is 200 or 429': (r) => r.status === 200 || r.status === 429,
    'body says allowed when 200': (r) => r.status !== 200 || r.json('allowed') === true,
    '429 carries Retry-After': (r) => r.status !== 429 || r.headers['Retry-After'] !== undefined,
    'X-RateLimit-Limit is LIMIT': () => limitHeader === String(LIMIT),
    'X-RateLimit-Remaining is 0..limit': () => remaining !== undefined && /^[0-9]+$/.test(remaining) && Number(remaining) <= Math.max(LIMIT, BURST),
  });
}
