"""SGLang protocol knowledge shared by the simulator, the collectors and the supervisor.

- ``sentinel.sglang.logparse`` — SGLang server log line → typed event (batch lines, start-up
  milestones, health-check failures, crash signatures).
- ``sentinel.sglang.metricnames`` — the ``sglang:*`` metric families of SGLang 0.5.9 (type,
  labels, histogram buckets).
"""
