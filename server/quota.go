package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/clip"
	"github.com/floodgate-rl/floodgate/metrics"
	"github.com/floodgate-rl/floodgate/quota"
)

// QuotaCheckRequest is the body of POST /v1/quota/check: consume cost
// units of a quota if they fit.
type QuotaCheckRequest struct {
	// Quota names a quota of the active configuration, e.g. "llm-tokens".
	Quota string `json:"quota"`
	// Identity maps dimension names to values, e.g. {"api_key": "k1"};
	// the quota's dimension(s) must be present, others are ignored.
	Identity map[string]string `json:"identity"`
	// Cost is what the request costs (1..floodgate.MaxCost); absent means
	// 1. Use /v1/quota/status to look without consuming.
	Cost *int64 `json:"cost,omitempty"`
}

// QuotaStatusRequest is the body of POST /v1/quota/status: the standing
// of an identity, consuming nothing.
type QuotaStatusRequest struct {
	// Quota and Identity are as in QuotaCheckRequest.
	Quota    string            `json:"quota"`
	Identity map[string]string `json:"identity"`
}

// QuotaReserveRequest is the body of POST /v1/quota/reserve: hold an
// estimate for work whose real cost is known only afterwards.
type QuotaReserveRequest struct {
	// Quota and Identity are as in QuotaCheckRequest.
	Quota    string            `json:"quota"`
	Identity map[string]string `json:"identity"`
	// RequestID names the unit of work, 1..128 bytes of printable ASCII;
	// settle it with the same id.
	RequestID string `json:"request_id"`
	// Estimate is what to hold, 1..floodgate.MaxCost (required).
	Estimate *int64 `json:"estimate"`
}

// QuotaSettleRequest is the body of POST /v1/quota/settle: commit the real
// cost of a reservation. Settling an id again changes nothing and returns
// the first outcome with "replayed": true, and "charged" and "refunded" 0
// (nothing was charged or given back again).
type QuotaSettleRequest struct {
	// Quota, Identity and RequestID are those of the reservation.
	Quota     string            `json:"quota"`
	Identity  map[string]string `json:"identity"`
	RequestID string            `json:"request_id"`
	// Actual is the real cost, 0..floodgate.MaxCost (required); 0
	// cancels the reservation.
	Actual *int64 `json:"actual"`
}

// QuotaPeriod is the calendar period a quota operation applied to.
type QuotaPeriod struct {
	// Start and End bound the period, in RFC 3339 in the quota's time
	// zone, e.g. "2026-12-01T00:00:00-05:00"; End is the next period's
	// Start.
	Start string `json:"start"`
	End   string `json:"end"`
	// Key names the period: "2026-12-01", "2026-W49", "2026-12".
	Key string `json:"key"`
}

// QuotaResponse is the body of every /v1/quota/ operation (HTTP 200; or
// 429 with ?enforce=1 when a check or reserve is denied). Amounts are in
// the quota's cost unit.
type QuotaResponse struct {
	// Allowed reports that the operation took effect: the check consumed
	// its cost, the reserve holds its estimate, the settle committed. For
	// a status it says whether one more unit fits.
	Allowed bool `json:"allowed"`
	// Quota and Tier say which limit applied.
	Quota string `json:"quota"`
	Tier  string `json:"tier"`
	// Limit is the period's limit, Used the committed usage (it can pass
	// Limit when settled costs overran their estimates), Reserved what
	// live reservations hold, Remaining what can still be taken.
	Limit     int64 `json:"limit"`
	Used      int64 `json:"used"`
	Reserved  int64 `json:"reserved"`
	Remaining int64 `json:"remaining"`
	// Fraction is (used + reserved) / limit; Soft reports that it reached
	// the quota's soft_threshold, Exhausted that nothing more fits.
	Fraction  float64 `json:"fraction"`
	Soft      bool    `json:"soft"`
	Exhausted bool    `json:"exhausted"`
	// Period is the period the operation applied to (a settle applies to
	// the period its reservation was made in while the hold is live, an
	// unmatched one to the period current when it arrived).
	Period QuotaPeriod `json:"period"`
	// RetryAfterMS is, when denied, a hint of when it may fit, in
	// milliseconds (rounded up): when enough reservations will have
	// expired for it to fit (at most the 128 expiring first counted), if
	// their expiry alone makes room before the period ends, else when the
	// period ends.
	RetryAfterMS int64 `json:"retry_after_ms"`
	// Reason is none, exhausted, cost_exceeds_limit or too_many_pending.
	Reason string `json:"reason"`
	// Charged is what the operation added to Used; Refunded, for a
	// settle, how much of the estimate was given back. Both are 0 for a
	// replayed settle: it adds and gives back nothing.
	Charged  int64 `json:"charged"`
	Refunded int64 `json:"refunded"`
	// Replayed reports a reserve or settle of an id already handled:
	// nothing changed (a settle's used, reserved and unmatched, and the
	// remaining, fraction, soft and exhausted computed from them, are
	// those of the first outcome). Unmatched reports a settle that found
	// no live reservation (its hold expired, or it never existed); it was
	// charged all the same, to the period current when it arrived.
	Replayed  bool `json:"replayed,omitempty"`
	Unmatched bool `json:"unmatched,omitempty"`
	// RequestID echoes a reserve's or settle's request id.
	RequestID string `json:"request_id,omitempty"`
}

// quotaOp is a validated quota request, bound to the configuration it was
// validated against.
type quotaOp struct {
	quota    *config.Quota
	values   map[string]string
	identity string
	id       string
	amount   int64
}

// validRequestID checks a reservation's request id as package quota
// does, so that a bad one is a 400 naming the field.
func validRequestID(id string) error {
	if id == "" {
		return badRequest("missing-request-id", "field \"request_id\" is required: it names the unit of work to reserve and settle")
	}
	return printableID("request_id", id, quota.MaxRequestIDLen, "invalid-request-id")
}

// decodeQuota validates the parts every quota request shares.
func decodeQuota(cfg *config.Config, name string, values map[string]string) (quotaOp, error) {
	if name == "" {
		return quotaOp{}, badRequest("missing-quota", "field \"quota\" is required")
	}
	q, ok := cfg.Quota(name)
	if !ok {
		return quotaOp{}, badRequest("unknown-quota", "unknown quota %q", clip.Text(name, 80))
	}
	if err := validateIdentity(values); err != nil {
		return quotaOp{}, err
	}
	if err := missingIdentity("quota "+strconv.Quote(q.Name), q.Dimensions, values); err != nil {
		return quotaOp{}, err
	}
	id, err := q.Identity(values)
	if err != nil {
		return quotaOp{}, badRequest("invalid-identity", "%s", identityDetail(err))
	}
	return quotaOp{quota: q, values: values, identity: id}, nil
}

// amount validates a whole-number field of range r; nil means def, or an
// error when def is negative (the field is required).
func amount(r numberRange, v *int64, def int64) (int64, error) {
	if v == nil {
		if def < 0 {
			return 0, badRequest("missing-cost", "field %q is required%s", r.field, r.hint)
		}
		return def, nil
	}
	if err := r.check("", *v); err != nil {
		return 0, err
	}
	return *v, nil
}

func decodeQuotaCheck(cfg *config.Config, body []byte) (quotaOp, error) {
	var r QuotaCheckRequest
	if err := decodeJSON(body, &r, "quota, identity, cost", quotaCost); err != nil {
		return quotaOp{}, err
	}
	op, err := decodeQuota(cfg, r.Quota, r.Identity)
	if err != nil {
		return op, err
	}
	op.amount, err = amount(quotaCost, r.Cost, 1)
	return op, err
}

func decodeQuotaStatus(cfg *config.Config, body []byte) (quotaOp, error) {
	var r QuotaStatusRequest
	if err := decodeJSON(body, &r, "quota, identity"); err != nil {
		return quotaOp{}, err
	}
	return decodeQuota(cfg, r.Quota, r.Identity)
}

// decodeQuotaRequest is decodeQuota for the operations that carry a
// request id (reserve and settle).
func decodeQuotaRequest(cfg *config.Config, quota string, identity map[string]string, id string) (quotaOp, error) {
	op, err := decodeQuota(cfg, quota, identity)
	if err != nil {
		return op, err
	}
	if err := validRequestID(id); err != nil {
		return op, err
	}
	op.id = id
	return op, nil
}

func decodeQuotaReserve(cfg *config.Config, body []byte) (quotaOp, error) {
	var r QuotaReserveRequest
	if err := decodeJSON(body, &r, "quota, identity, request_id, estimate", reserveEstimate); err != nil {
		return quotaOp{}, err
	}
	op, err := decodeQuotaRequest(cfg, r.Quota, r.Identity, r.RequestID)
	if err != nil {
		return op, err
	}
	op.amount, err = amount(reserveEstimate, r.Estimate, -1)
	return op, err
}

func decodeQuotaSettle(cfg *config.Config, body []byte) (quotaOp, error) {
	var r QuotaSettleRequest
	if err := decodeJSON(body, &r, "quota, identity, request_id, actual", settleActual); err != nil {
		return quotaOp{}, err
	}
	op, err := decodeQuotaRequest(cfg, r.Quota, r.Identity, r.RequestID)
	if err != nil {
		return op, err
	}
	op.amount, err = amount(settleActual, r.Actual, -1)
	return op, err
}

// quotaKind is one of the /v1/quota/ operations.
type quotaKind uint8

const (
	quotaCheck quotaKind = iota
	quotaStatus
	quotaReserve
	quotaSettle
)

// operation is the store operation of k.
func (k quotaKind) operation() operation {
	switch k {
	case quotaStatus:
		return opQuotaStatus
	case quotaReserve:
		return opQuotaReserve
	case quotaSettle:
		return opQuotaSettle
	}
	return opQuotaCheck
}

func (s *Server) handleQuotaCheck(w http.ResponseWriter, r *http.Request) {
	s.quotaOp(w, r, quotaCheck, decodeQuotaCheck)
}

func (s *Server) handleQuotaStatus(w http.ResponseWriter, r *http.Request) {
	s.quotaOp(w, r, quotaStatus, decodeQuotaStatus)
}

func (s *Server) handleQuotaReserve(w http.ResponseWriter, r *http.Request) {
	s.quotaOp(w, r, quotaReserve, decodeQuotaReserve)
}

func (s *Server) handleQuotaSettle(w http.ResponseWriter, r *http.Request) {
	s.quotaOp(w, r, quotaSettle, decodeQuotaSettle)
}

func (s *Server) quotaOp(w http.ResponseWriter, r *http.Request, kind quotaKind, decode func(*config.Config, []byte) (quotaOp, error)) {
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	enforce, err := enforceParam(r.URL.RawQuery)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	cfg := s.cfg.Load()
	op, err := decode(cfg, body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	eng, err := s.enginesFor(cfg)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.decisionContext(r.Context())
	defer cancel()
	tier := s.operationTier(ctx, cfg, op.quota.Name, op.quota.Tiered(), op.quota.TierDimension, op.values)
	q := eng.quota(op.quota.Name, tier)
	var res quota.Result
	err = s.guard(ctx, op.identity, func(ctx context.Context) (wrote bool, err error) {
		switch kind {
		case quotaCheck:
			res, err = q.Check(ctx, op.identity, op.amount)
		case quotaStatus:
			res, err = q.Status(ctx, op.identity)
		case quotaReserve:
			res, err = q.Reserve(ctx, op.identity, op.id, op.amount)
		case quotaSettle:
			res, err = q.Settle(ctx, op.identity, op.id, op.amount)
		}
		return quotaWrote(kind, res), err
	})
	if err != nil {
		s.fail(w, r, s.operationProblem(r.Context(), kind.operation(), err))
		return
	}
	if (kind == quotaCheck || kind == quotaReserve) && !res.Replayed {
		// "quota:" and not "quota/": no policy name holds a ':', so no
		// policy's "policy/layer:identity" key (a policy named quota
		// included) can be this one.
		key := "quota:" + op.quota.Name + ":" + op.identity
		s.decided.Decision(metrics.Labels{Policy: op.quota.Name, Route: routeOf(r), Tier: tier}, key, res.Allowed)
	}
	resp := quotaResponse(op, tier, res)
	fr := res.Floodgate()
	setRateHeaders(w.Header(), fr.Limit, fr.Remaining, ceilSeconds(fr.ResetAt), res.Allowed, resp.RetryAfterMS)
	status := http.StatusOK
	if enforce && !res.Allowed {
		status = http.StatusTooManyRequests
	}
	writeJSON(w, status, resp)
}

// quotaWrote reports whether a successful quota operation of kind wrote
// what a Redis out of memory refuses (an HSET of the usage): a charge, a
// hold taken, a settlement recorded. A status read, a denial and a
// replay write nothing of the kind.
func quotaWrote(kind quotaKind, res quota.Result) bool {
	switch kind {
	case quotaCheck:
		return res.Charged > 0
	case quotaReserve:
		return res.Allowed && !res.Replayed
	case quotaSettle:
		return !res.Replayed
	}
	return false
}

func quotaResponse(op quotaOp, tier string, res quota.Result) QuotaResponse {
	return QuotaResponse{
		Allowed:      res.Allowed,
		Quota:        op.quota.Name,
		Tier:         tier,
		Limit:        res.Limit,
		Used:         res.Used,
		Reserved:     res.Reserved,
		Remaining:    res.Remaining,
		Fraction:     res.Fraction,
		Soft:         res.Soft,
		Exhausted:    res.Exhausted,
		Period:       QuotaPeriod{Start: res.Period.Start.Format(time.RFC3339), End: res.Period.End.Format(time.RFC3339), Key: res.Period.Key},
		RetryAfterMS: ceilMillis(res.RetryAfter),
		Reason:       res.Reason.String(),
		Charged:      res.Charged,
		Refunded:     res.Refunded,
		Replayed:     res.Replayed,
		Unmatched:    res.Unmatched,
		RequestID:    op.id,
	}
}

// operationProblem classifies the failure of op, a quota or concurrency
// operation: the conditions a caller must act on become 409 problems;
// store failures are returned marked with op, for fail to classify.
func (s *Server) operationProblem(ctx context.Context, op operation, err error) error {
	switch {
	case errors.Is(err, quota.ErrQuotaStateLost):
		s.warn.Error(ctx, "quota state lost", "quota state lost; refusing until it is restored", "error", err)
		return &problemError{status: http.StatusConflict, kind: "quota-state-lost",
			detail: "the quota's usage for this period is missing from the store (deleted, evicted or lost in a failover), so nothing was decided; fail closed and have an operator restore it (POST /admin/v1/quota/restore, with \"period\" when the lost period is the previous one): " + err.Error()}
	case errors.Is(err, quota.ErrAlreadySettled):
		return &problemError{status: http.StatusConflict, kind: "quota-already-settled",
			detail: "this request_id was already settled in this period (or, for a reserve, in the previous one); use a new id for new work: " + err.Error()}
	case errors.Is(err, floodgate.ErrInvalidKey), errors.Is(err, floodgate.ErrInvalidCost):
		return badRequest("invalid-request", "%v", err)
	}
	return op.failed(err)
}
