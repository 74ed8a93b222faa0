"""The project's own app: one row per run of its dj-stripe signal handler (the effect the
probe counts), and the `endpoint` command that registers the webhook endpoint's secret."""
