"""Options of one simulated server (what ``sentinel sim`` flags map to)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sglang_sentinel_sim.launchflags import LaunchFlags, check_version, has_option, releases_with
from sglang_sentinel_sim.launchmodel import apply_launch
from sglang_sentinel_sim.profiles import DEFAULT_PROFILE, Profile, get_profile
from sglang_sentinel_sim.versions import DEFAULT_VERSION, VERSIONS

__all__ = ["SimConfig"]


@dataclass(frozen=True, slots=True)
class SimConfig:
    host: str = "127.0.0.1"
    port: int = 30000
    # Control API: always on 127.0.0.1; 0 = an OS-assigned free port.
    control_port: int = 0
    profile: str = DEFAULT_PROFILE
    speed: float = 1.0
    # Divides every performance-model time constant: 0.85 = a server 15 % slower, 1.2 = 20 % faster
    # (what calibration needs to test re-calibration after a capacity change). Start-up is unchanged.
    capacity_scale: float = 1.0
    api_key: str | None = None
    enable_metrics: bool = False
    faults: tuple[str, ...] = ()
    # Real seconds after which the server stops by itself (None = never).
    lifetime: float | None = None
    served_model_name: str | None = None
    model_path: str | None = None
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int | None = None
    context_length: int | None = None
    decode_log_interval: int = 40
    stream_interval: int = 1
    # "profile" = the profile's parser; None/"none" = thinking text lands in `content`.
    reasoning_parser: str | None = "profile"
    # Server seconds from launch to ready (None = the profile's start-up phases).
    startup_time: float | None = None
    # SGLANG_HEALTH_CHECK_TIMEOUT, server seconds.
    health_timeout: float = 20.0
    # SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION: false = plain /health answers 200 without a probe.
    health_generation: bool = True
    ready_file: str | None = None
    seed: int = 0
    log_ms: bool = False
    access_log: bool = True
    skip_server_warmup: bool = False
    enable_cache_report: bool = False
    # Which SGLang release the simulator speaks (log lines, /metrics, /v1/loads, crash texts, flags
    # accepted): any release the daemon's table read (versions.VERSIONS); see versions.BEHAVIOURS.
    sglang_version: str = DEFAULT_VERSION
    enable_priority_scheduling: bool = False
    enable_metrics_for_all_schedulers: bool = False
    # None = the profile's tensor-parallel size.
    tp_size: int | None = None
    # A flag from 0.5.10 (options.json); Decode lines print the GPU and CPU pools from 0.5.11.
    enable_hisparse: bool = False
    # The launch flags the performance model reacts to (launchflags.py, launchmodel.py).
    launch: LaunchFlags = field(default_factory=LaunchFlags)
    # Multi-node (SGLang's --nnodes/--node-rank/--dist-init-addr/--dist-timeout): rank 0 serves the
    # API once every rank joined; ranks >= 1 serve only the dummy health server (follower.py).
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None
    dist_timeout: float | None = None
    # Prefill/decode disaggregation role (sglang_sentinel_sim.disagg): null, prefill or decode.
    disaggregation_mode: str = "null"
    disaggregation_bootstrap_port: int = 8998
    disaggregation_transfer_backend: str = "mooncake"

    def resolved_profile(self) -> Profile:
        p = get_profile(self.profile)
        changes: dict[str, object] = {}
        if self.served_model_name:
            changes["served_model_name"] = self.served_model_name
        if self.model_path:
            changes["model_path"] = self.model_path
        if self.max_total_tokens is not None:
            changes["max_total_num_tokens"] = self.max_total_tokens
        if self.max_running_requests is not None:
            changes["max_running_requests"] = self.max_running_requests
        if self.chunked_prefill_size is not None:
            changes["chunked_prefill_size"] = self.chunked_prefill_size
        if self.max_prefill_tokens is not None:
            changes["max_prefill_tokens"] = self.max_prefill_tokens
        if self.context_length is not None:
            changes["context_length"] = self.context_length
        if self.tp_size is not None:
            changes["tp_size"] = self.tp_size
        if self.reasoning_parser != "profile":
            parser = self.reasoning_parser
            changes["reasoning_parser"] = None if parser in (None, "", "none") else parser
        if changes:
            p = p.with_overrides(**changes)
            changes = {}
        p = apply_launch(
            p, self.launch, self.sglang_version, max_total_given=self.max_total_tokens is not None
        )
        if self.startup_time is not None:
            total = p.load_weights_s + p.kv_alloc_s + p.graph_capture_s + p.warmup_s
            scale = self.startup_time / total if total > 0 else 0.0
            changes["load_weights_s"] = p.load_weights_s * scale
            changes["kv_alloc_s"] = p.kv_alloc_s * scale
            changes["graph_capture_s"] = p.graph_capture_s * scale
            changes["warmup_s"] = p.warmup_s * scale
        if self.capacity_scale != 1.0:
            f = self.capacity_scale
            changes["prefill_base_s"] = p.prefill_base_s / f
            # A token rate is the inverse of a time constant: dividing 1/rate by F multiplies the rate.
            changes["prefill_tokens_per_s"] = p.prefill_tokens_per_s * f
            changes["decode_base_s"] = p.decode_base_s / f
            changes["decode_graph_base_s"] = p.decode_graph_base_s / f
            changes["decode_per_req_s"] = p.decode_per_req_s / f
            changes["decode_per_kv_token_s"] = p.decode_per_kv_token_s / f
            changes["decode_per_gen_token_s"] = p.decode_per_gen_token_s / f
        return p.with_overrides(**changes) if changes else p

    def validate(self) -> None:
        """Raise ValueError naming the first bad option."""
        if not self.speed > 0 or self.speed != self.speed or self.speed == float("inf"):
            raise ValueError(f"--speed must be a positive number, got {self.speed}")
        f = self.capacity_scale
        if not f > 0 or f != f or f == float("inf"):
            raise ValueError(f"--capacity-scale must be a positive number, got {f}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port must be 0..65535, got {self.port}")
        if not 0 <= self.control_port <= 65535:
            raise ValueError(f"--control-port must be 0..65535, got {self.control_port}")
        for name in (
            "max_total_tokens",
            "max_running_requests",
            "chunked_prefill_size",
            "max_prefill_tokens",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if self.context_length is not None and self.context_length < 2:
            raise ValueError(f"--context-length must be at least 2, got {self.context_length}")
        if self.sglang_version not in VERSIONS:
            known = ", ".join(VERSIONS)
            raise ValueError(
                f"--sglang-version must be a release read: one of {known}, got {self.sglang_version!r}"
            )
        check_version(self.launch, self.sglang_version)
        if self.tp_size is not None and self.tp_size < 1:
            raise ValueError(f"--tp-size must be at least 1, got {self.tp_size}")
        if self.enable_hisparse and not has_option(self.sglang_version, "--enable-hisparse"):
            # That release's argparse has no such option (options.json: from 0.5.10).
            raise ValueError(
                f"--enable-hisparse: unrecognized by SGLang {self.sglang_version} "
                f"({releases_with('--enable-hisparse')} have it)"
            )
        if self.disaggregation_mode not in ("null", "prefill", "decode"):
            raise ValueError(
                f"--disaggregation-mode must be null, prefill or decode, got {self.disaggregation_mode!r}"
            )
        if not 1 <= self.disaggregation_bootstrap_port <= 65535 or (
            self.disaggregation_mode == "prefill" and self.disaggregation_bootstrap_port == self.port
        ):
            raise ValueError(
                f"--disaggregation-bootstrap-port {self.disaggregation_bootstrap_port}: a port in 1..65535"
                " other than --port"
            )
        if self.decode_log_interval < 1:
            raise ValueError(f"--decode-log-interval must be at least 1, got {self.decode_log_interval}")
        if self.stream_interval < 1:
            raise ValueError(f"--stream-interval must be at least 1, got {self.stream_interval}")
        if self.lifetime is not None and not self.lifetime > 0:
            raise ValueError(f"--lifetime must be positive, got {self.lifetime}")
        if self.startup_time is not None and self.startup_time < 0:
            raise ValueError(f"--startup-time must be >= 0, got {self.startup_time}")
        if not self.health_timeout > 0:
            raise ValueError(f"--health-timeout must be positive, got {self.health_timeout}")
        self._validate_multinode()
        self.resolved_profile()

    def _validate_multinode(self) -> None:
        from sglang_sentinel_sim.rendezvous import parse_dist_init_addr

        if self.nnodes < 1:
            raise ValueError(f"--nnodes must be at least 1, got {self.nnodes}")
        if not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"--node-rank must be 0..{self.nnodes - 1}, got {self.node_rank}")
        if self.nnodes > 1 and self.dist_init_addr is None:
            # SGLang's own assertion (server_args.py): the head node's address is required.
            raise ValueError("--dist-init-addr: please provide --dist-init-addr as host:port of head node")
        if self.dist_init_addr is not None:
            parse_dist_init_addr(self.dist_init_addr)
        if self.dist_timeout is not None and not self.dist_timeout > 0:
            raise ValueError(f"--dist-timeout must be positive, got {self.dist_timeout}")
