package doctor

import "context"

func (r *run) instanceClockChecks(context.Context) {}

func (r *run) instanceChecks(context.Context) {
	if len(r.opts.Instances) == 0 {
		r.check(GroupInstances, "instances", func(c *Check) {
			c.Status, c.Summary, c.Read = Info, "no instance URLs given (--instance): skipped", "nothing"
		})
	}
}

func (r *run) configChecks(context.Context) {}

func (r *run) monitoringChecks(context.Context) {
	if r.opts.PrometheusURL == "" {
		r.check(GroupMonitoring, "prometheus", func(c *Check) {
			c.Status, c.Summary, c.Read = Info, "no Prometheus URL given (--prometheus): skipped", "nothing"
		})
	}
}
