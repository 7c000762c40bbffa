// k6 load test of Floodgate's HTTP API: the lesson's scenario (50 virtual
// users, 200 requests per second for 30 seconds) against POST /v1/check.
//
//   k6 run loadtest/check.js
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e LIMIT=100 -e WINDOW_S=60 loadtest/check.js
//
// Every setting comes from an environment variable (-e NAME=value); see
// loadtest/README.md. The run fails (k6 exits non-zero) when a threshold
// is crossed: the share of 429s is not the one the limit implies, the p99
// latency is too high, requests fail, or the service cannot keep up.

import http from 'k6/http';
import { check, fail, sleep } from 'k6';
import exec from 'k6/execution';
import { Counter, Rate } from 'k6/metrics';

function num(name, def) {
  const raw = __ENV[name];
  if (raw === undefined || raw === '') {
    return def;
  }
  const v = Number(raw);
  if (!Number.isFinite(v) || v < 0) {
    throw new Error(`${name}=${raw}: want a non-negative number`);
  }
  return v;
}

const BASE_URL = (__ENV.BASE_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '');
const POLICY = __ENV.POLICY || 'api';
const DIMENSION = __ENV.DIMENSION || 'user';
const RATE = num('RATE', 200); // requests per second
const DURATION_S = num('DURATION_S', 30);
const VUS = num('VUS', 50);
const USERS = Math.max(1, num('USERS', 50)); // distinct identities
const LIMIT = num('LIMIT', 100); // the policy's limit per identity...
const WINDOW_S = num('WINDOW_S', 60); // ...per this many seconds
const TOLERANCE = num('TOLERANCE', 0.05); // allowed gap in the 429 ratio
const P99_MS = num('P99_MS', 50);
// RUN_ID prefixes every identity. The default, a fresh prefix per run so
// that every run starts with fresh counters, is chosen once in setup():
// init code runs once per VU, and each VU would pick its own.
const RUN_ID = __ENV.RUN_ID || '';
const ALIGN = (__ENV.ALIGN || 'true') !== 'false';

// The share of 429s an exact limiter gives: each identity gets
// RATE*DURATION_S/USERS requests, spread evenly, and may pass LIMIT per
// WINDOW_S (LIMIT at once when the run is shorter than the window). That
// holds when the run lies within one window: Floodgate's windows start at
// multiples of their length since the Unix epoch, and a run straddling a
// boundary lets more through (a fixed window up to one window more; the
// built-in api policy's sliding window a share depending on when the run
// starts), so setup() waits for the next window when the run would
// straddle one (ALIGN=false skips the wait). EXPECTED_429_RATIO
// overrides the estimate (and skips the wait).
function expected429Ratio() {
  if (__ENV.EXPECTED_429_RATIO) {
    return num('EXPECTED_429_RATIO', 0);
  }
  const perUser = (RATE * DURATION_S) / USERS;
  const allowedPerUser = LIMIT * Math.max(1, DURATION_S / WINDOW_S);
  return perUser <= allowedPerUser ? 0 : 1 - allowedPerUser / perUser;
}

const EXPECTED = expected429Ratio();
const LOW = Math.max(0, EXPECTED - TOLERANCE);
const HIGH = Math.min(1, EXPECTED + TOLERANCE);

const rateLimited = new Rate('rate_limited'); // share of checks answered 429
const unexpected = new Counter('unexpected_status'); // neither 200 nor 429

// 429 is an expected answer, not a failed request.
http.setResponseCallback(http.expectedStatuses(200, 429));

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
  thresholds: {
    rate_limited: [`rate>=${LOW.toFixed(4)}`, `rate<=${HIGH.toFixed(4)}`],
    unexpected_status: ['count==0'],
    http_req_failed: ['rate<0.01'],
    http_req_duration: [`p(99)<${P99_MS}`],
    checks: ['rate>0.99'],
    // The service kept up: at most 1% of the scheduled checks never started.
    dropped_iterations: [`count<=${Math.ceil(RATE * DURATION_S * 0.01)}`],
  },
};

const params = { headers: { 'Content-Type': 'application/json' }, tags: { name: 'check' } };

function checkOnce(identity) {
  const body = JSON.stringify({ policy: POLICY, identity: { [DIMENSION]: identity }, cost: 1 });
  return http.post(`${BASE_URL}/v1/check?enforce=1`, body, params);
}

export function setup() {
  const runId = RUN_ID || `k6${Date.now().toString(36)}`;
  const res = checkOnce(`${runId}-setup`);
  if (res.status !== 200 && res.status !== 429) {
    fail(`POST ${BASE_URL}/v1/check answered ${res.status}: ${res.body}; is floodgate serve running with policy "${POLICY}"?`);
  }
  console.log(`identities ${runId}-0..${USERS - 1}; expected 429 ratio ${(100 * EXPECTED).toFixed(1)}% (accepting ${(100 * LOW).toFixed(1)}%..${(100 * HIGH).toFixed(1)}%)`);
  if (ALIGN && !__ENV.EXPECTED_429_RATIO && DURATION_S + 2 < WINDOW_S) {
    // Start the run so that it ends inside the window it starts in (2 s
    // spare for k6 to start the scenario).
    const into = (Date.now() / 1000) % WINDOW_S;
    if (into + DURATION_S + 2 > WINDOW_S) {
      const wait = WINDOW_S - into + 0.2;
      console.log(`waiting ${wait.toFixed(1)} s for the next ${WINDOW_S} s window to start, so that the run lies within one (ALIGN=false skips this)`);
      sleep(wait);
    }
  }
  return { runId };
}

export default function (data) {
  const user = `${data.runId}-${exec.scenario.iterationInTest % USERS}`;
  const res = checkOnce(user);
  const limited = res.status === 429;
  if (res.status !== 200 && !limited) {
    unexpected.add(1);
  }
  rateLimited.add(limited);
  check(res, {
    'status is 200 or 429': (r) => r.status === 200 || r.status === 429,
    'body says allowed when 200': (r) => r.status !== 200 || r.json('allowed') === true,
    '429 carries Retry-After': (r) => r.status !== 429 || r.headers['Retry-After'] !== undefined,
  });
}
