"""SGLang protocol knowledge shared by the simulator, the collectors and the supervisor.

- ``sglang_sentinel.sglang.logparse`` — SGLang server log line → typed event (batch lines, start-up
  milestones, health-check failures, crash signatures).
- ``sglang_sentinel.sglang.logprefix`` — a log line's ``[timestamp ranks]`` prefix (``Ranks``).

The catalog of SGLang 0.5.9's ``sglang:*`` metric families (type, labels, buckets) is test data:
``tests/support/sglang_metricnames.py``, generated next to it. Production code re-exposes
SGLang's series as the server emits them and needs no list of them.
"""
