// pint's configuration for the chart's PrometheusRule (deploy/checks/outside-linters.mjs), run with
// --offline (no Prometheus to ask): every check that needs none, and the only place for an exception.
// Each disabled check stands on a line of its own in `disabled`, after a comment giving its reason.
checks {
  disabled = [
  ]
}
