"""What the service tells operators: process and decision logs (``logs``,
``decision_log``), OpenTelemetry traces (``tracing``) and Prometheus metrics
(``metrics``); docs/observability.md."""
