"""Alerts: rules per experiment or per user that notify by e-mail or webhook when a run fails,
finishes, is pruned or stalls, or a metric crosses a threshold; rate-limited, with a delivery log."""
