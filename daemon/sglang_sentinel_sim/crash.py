"""The log tail a dying SGLang server leaves behind, per cause.

A supervisor can only classify a crash from the log (the exit is almost always SIGKILL), so each
cause ends with the lines a real server prints: the scheduler's ``Scheduler hit an exception:``
record with a Python traceback (continuation lines carry no timestamp), then the main process's
SIGQUIT line. File paths and line numbers are those of the 0.5.9 wheel.

The other texts (``crash:text=...`` faults), per version: "0.5.23" below is every release from the
daemon's row for that text (``sglang_sentinel_sim.versions.BEHAVIOURS``: 0.5.10 for ``nan``,
``died_init`` and ``subprocess``, 0.5.14 for the sanitizer), "0.5.9" every release before it:

- ``tokenizer``: ``TokenizerManager hit an exception: <traceback>``, then
  ``kill_process_tree(include_parent=True)``: SIGKILL with no SIGQUIT line (both versions,
  srt/managers/tokenizer_manager.py ``print_exception_wrapper``).
- ``nan``: 0.5.23 ``SGLANG_ENABLE_NAN_LOGITS_CHECK`` device assert ``NaN detected! <where>``
  (srt/utils/async_probe.py ``maybe_detect_nan``; the CUDA wrapper text around it is CUDA's),
  then the scheduler's ``RuntimeError: CUDA error: device-side assert triggered``; 0.5.9 raises
  ``ValueError: Detected errors during sampling! NaN in the logits.`` (srt/layers/sampler.py L67-72).
- ``died_init`` (start-up): a scheduler SIGKILLed while loading; 0.5.23's main process raises
  ``RuntimeError: Rank N scheduler died during initialization (exit code: -9). ...``
  (srt/entrypoints/engine.py ``_scheduler_died_error``), 0.5.9's ``Rank N scheduler is dead. ...``
  (srt/entrypoints/engine.py L897); the process then exits with status 1 (launch_server.py lets the
  exception end it after ``kill_process_tree(include_parent=False)``).
- ``subprocess`` (0.5.23 only): the subprocess watchdog's ``Subprocess scheduler_N (pid=P) crashed
  with exit code -11. Triggering SIGQUIT for cleanup...`` (srt/utils/watchdog.py
  ``SubprocessWatchdog._check_processes``), the main process's SIGQUIT handler, SIGKILL.
- :data:`NAN_SANITIZED` (not a crash): 0.5.23 ``SGLANG_SANITIZE_NAN_LOGITS`` warning, once per
  process (srt/utils/async_probe.py ``_AsyncNanWarner.check``).
"""

from __future__ import annotations

from typing import Final, Literal

from sglang_sentinel_sim.versions import has, wheel

__all__ = [
    "CRASH_TEXTS",
    "NAN_SANITIZED",
    "SITE",
    "CrashKind",
    "crash_lines",
    "died_init_lines",
    "nan_assert_lines",
    "subprocess_crash_line",
    "tokenizer_lines",
]

CrashKind = Literal[
    "exception",
    "oom",
    "watchdog",
    "startup",
    "tokenizer",
    "nan",
    "died_init",
    "subprocess",
    "kv_pool",
    "graph_oom",
    "unsupported",
    "profiler",
    "refused",
]
#: ``crash:text=...`` values: the default ``sampler`` is the "exception" kind.
CRASH_TEXTS: Final = ("sampler", "tokenizer", "nan", "died_init", "subprocess")

NAN_SANITIZED: Final = (
    "NaN detected in sampler: next_token_logits; values were sanitized before sampling. This usually "
    "indicates numerical overflow (e.g. fp16 activations) or an upstream bug producing NaN. Logged once; "
    "further occurrences are silent."
)

SITE: Final = "/usr/local/lib/python3.12/dist-packages"  # where tracebacks put the wheels
_SITE: Final = SITE

_HEAD: Final = (
    "Traceback (most recent call last):\n"
    f'  File "{_SITE}/sglang/srt/managers/scheduler.py", line 3170, in run_scheduler_process\n'
    "    scheduler.event_loop_normal()\n"
    f'  File "{_SITE}/torch/utils/_contextlib.py", line 120, in decorate_context\n'
    "    return func(*args, **kwargs)\n"
    "           ^^^^^^^^^^^^^^^^^^^^^\n"
    f'  File "{_SITE}/sglang/srt/managers/scheduler.py", line 1089, in event_loop_normal\n'
    "    result = self.run_batch(batch)\n"
    "             ^^^^^^^^^^^^^^^^^^^^^\n"
    f'  File "{_SITE}/sglang/srt/managers/scheduler.py", line 2468, in run_batch\n'
    "    batch_result = self.model_worker.forward_batch_generation(\n"
    "                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    f'  File "{_SITE}/sglang/srt/managers/tp_worker.py", line 398, in forward_batch_generation\n'
)

_SAMPLER: Final = (
    "    batch_result.next_token_ids = self.model_runner.sample(\n"
    "                                  ^^^^^^^^^^^^^^^^^^^^^^^^\n"
    f'  File "{_SITE}/sglang/srt/model_executor/model_runner.py", line 2391, in sample\n'
    "    next_token_ids = self.sampler(\n"
    "                     ^^^^^^^^^^^^^\n"
    f'  File "{_SITE}/sglang/srt/layers/sampler.py", line 108, in forward\n'
    "    batch_next_token_ids = top_k_top_p_min_p_sampling_from_probs_torch(\n"
    "                           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    f'  File "{_SITE}/sglang/srt/layers/sampler.py", line 289, in '
    "top_k_top_p_min_p_sampling_from_probs_torch\n"
    "    sampled_index = torch.multinomial(probs_sort, num_samples=1)\n"
    "                    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0\n"
)

_FORWARD: Final = (
    "    logits_output, can_run_cuda_graph = self.model_runner.forward(\n"
    "                                        ^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    f'  File "{_SITE}/sglang/srt/model_executor/model_runner.py", line 2297, in forward\n'
    "    output = self._forward_raw(\n"
    "             ^^^^^^^^^^^^^^^^^\n"
    f'  File "{_SITE}/sglang/srt/model_executor/model_runner.py", line 2356, in _forward_raw\n'
    "    ret = self.forward_decode(\n"
    "          ^^^^^^^^^^^^^^^^^^\n"
    f'  File "{_SITE}/sglang/srt/models/deepseek_v2.py", line 3012, in forward\n'
    "    hidden_states = self.model(\n"
    "                    ^^^^^^^^^^^\n"
    f'  File "{_SITE}/sglang/srt/layers/moe/fused_moe_triton/layer.py", line 871, in forward\n'
    "    combine_input = self.run_moe_core(\n"
    "                    ^^^^^^^^^^^^^^^^^^\n"
)


def _oom(used_gb: float, total_gb: float) -> str:
    free_mib = max(1.0, (total_gb - used_gb) * 1024 * 0.01)
    return (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.76 GiB. GPU 0 has a total capacity "
        f"of {total_gb:.2f} GiB of which {free_mib:.2f} MiB is free. Including non-PyTorch memory, "
        f"this process has {used_gb:.2f} GiB memory in use. Of the allocated memory "
        f"{used_gb - 2.1:.2f} GiB is allocated by "
        "PyTorch, and 1.13 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
        "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
    )


_STARTUP: Final = (
    "Traceback (most recent call last):\n"
    f'  File "{_SITE}/sglang/srt/managers/scheduler.py", line 3129, in run_scheduler_process\n'
    "    scheduler = Scheduler(\n"
    "                ^^^^^^^^^^\n"
    f'  File "{_SITE}/sglang/srt/managers/scheduler.py", line 352, in __init__\n'
    "    self.init_model_worker()\n"
    f'  File "{_SITE}/sglang/srt/managers/tp_worker.py", line 247, in __init__\n'
    "    self.model_runner = ModelRunner(\n"
    "                        ^^^^^^^^^^^^\n"
    f'  File "{_SITE}/sglang/srt/model_executor/model_runner.py", line 412, in initialize\n'
    "    self.load_model()\n"
    f'  File "{_SITE}/sglang/srt/model_executor/model_runner.py", line 905, in load_model\n'
    "    self.model = get_model(\n"
    "                 ^^^^^^^^^^\n"
    f'  File "{_SITE}/sglang/srt/model_loader/loader.py", line 664, in load_model\n'
    "    self.load_weights_and_postprocess(\n"
    f'  File "{_SITE}/sglang/srt/models/deepseek_v2.py", line 3406, in load_weights\n'
    "    weight_loader(param, loaded_weight)\n"
    "RuntimeError: TllmGenFmhaRunner: Unsupported architecture\n"
)


# A start-up failure of the launch (launchmodel.py): ModelRunner.initialize, then the failing step.
_INIT: Final = _STARTUP.split('  File "' + _SITE + '/sglang/srt/model_executor/model_runner.py", line 412')[
    0
] + (f'  File "{_SITE}/sglang/srt/model_executor/model_runner.py", line 412, in initialize\n')
# CUDA_GRAPH_CAPTURE_FAILED_MSG (0.5.9 model_executor/cuda_graph_runner.py; 0.5.23
# model_executor/runner_backend_utils/__init__.py).
_CAPTURE_HINTS: Final = {
    "0.5.9": (
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
        "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
        "3. disable torch compile by not using --enable-torch-compile\n"
        "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    ),
    "0.5.23": (
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
        "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
        "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. "
        "(Not recommended. Huge performance loss)\n"
    ),
}


def _launch_failure(kind: CrashKind, detail: str, version: str, used_gb: float, total_gb: float) -> str:
    if kind == "kv_pool":
        # 0.5.9 model_runner_kv_cache_mixin.py init_memory_pool; 0.5.23 pool_configurator.py.
        value = (
            f"mem_fraction_static={detail}"
            if has("crash.kv_pool_text", version)
            else f"self.server_args.mem_fraction_static={detail}"
        )
        return (
            _INIT
            + "    self.init_memory_pool(min_per_gpu_memory)\n"
            + "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            + f"Current value: {value}\n"
        )
    if kind == "graph_oom":
        return (
            _INIT
            + "    self.init_device_graphs()\n"
            + "Exception: Capture cuda graph failed: "
            + _oom(used_gb, total_gb).removeprefix("torch.OutOfMemoryError: ")
            + _CAPTURE_HINTS[wheel("cli.disable_cuda_graph_deprecated", version)]
            + "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
        )
    if kind == "refused":  # SGLang's own check of the backends, in the attention backend's __init__
        return _INIT + "    self.init_attention_backend()\n" + f"ValueError: {detail}\n"
    # unsupported: the class of error SM120 gets from kernels built for other GPUs (DeepGEMM's
    # attention.hpp, TRT-LLM-gen's fmhaRunner: "Unsupported architecture"), here naming the backend.
    return (
        _INIT + "    self.init_attention_backend()\n" + f"RuntimeError: {detail}: Unsupported architecture\n"
    )


def crash_lines(
    kind: CrashKind,
    *,
    used_gb: float = 93.8,
    total_gb: float = 94.97,
    detail: str = "",
    version: str = "0.5.23",
) -> tuple[str, str]:
    """(the scheduler's exception record, the traceback body) for a crash of ``kind``
    (``detail``: the memory fraction of ``kv_pool``, the backend of ``unsupported``, SGLang's
    message of ``refused``)."""
    if kind in ("kv_pool", "graph_oom", "unsupported", "refused"):
        body = _launch_failure(kind, detail, version, used_gb, total_gb)
        return "Scheduler hit an exception: " + body.splitlines()[0], _after_first(body)
    if kind == "profiler":
        return "Scheduler hit an exception: " + _PROFILER.splitlines()[0], _after_first(_PROFILER)
    if kind == "startup":
        return "Scheduler hit an exception: " + _STARTUP.splitlines()[0], _after_first(_STARTUP)
    if kind == "oom":
        body = _HEAD + _FORWARD + _oom(used_gb, total_gb)
    elif kind == "watchdog":
        return ("Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", "")
    else:
        body = _HEAD + _SAMPLER
    return "Scheduler hit an exception: " + body.splitlines()[0], _after_first(body)


# Through 0.5.13.post1: a second plain /start_profile while torch's profiler runs
# (scheduler_profiler_mixin.py start_profile has no try/except around torch_profiler.start();
# from 0.5.14 it is caught: versions.BEHAVIOURS profile.double_start_caught). 0.5.9's frames.
_PROFILER: Final = (
    "Traceback (most recent call last):\n"
    f'  File "{_SITE}/sglang/srt/managers/scheduler.py", line 3170, in run_scheduler_process\n'
    "    scheduler.event_loop_normal()\n"
    f'  File "{_SITE}/sglang/srt/managers/scheduler.py", line 1083, in event_loop_normal\n'
    "    self.process_input_requests(recv_reqs)\n"
    f'  File "{_SITE}/sglang/srt/managers/scheduler.py", line 1345, in process_input_requests\n'
    "    output = self._request_dispatcher(recv_req)\n"
    f'  File "{_SITE}/sglang/srt/managers/scheduler_profiler_mixin.py", line 358, in profile\n'
    "    return self.start_profile()\n"
    f'  File "{_SITE}/sglang/srt/managers/scheduler_profiler_mixin.py", line 166, in start_profile\n'
    "    self.torch_profiler.start()\n"
    f'  File "{_SITE}/torch/profiler/profiler.py", line 883, in start\n'
    "    self._transit_action(ProfilerAction.NONE, self.current_action)\n"
    "RuntimeError: Profiler is already enabled on this thread.\n"
)


def _after_first(text: str) -> str:
    return text.split("\n", 1)[1] if "\n" in text else ""


_TOKENIZER: Final = (
    "Traceback (most recent call last):\n"
    f'  File "{_SITE}/sglang/srt/managers/tokenizer_manager.py", line 4040, in print_exception_wrapper\n'
    "    await func()\n"
    f'  File "{_SITE}/sglang/srt/managers/tokenizer_manager.py", line 1890, in handle_loop\n'
    "    self._result_dispatcher(recv_obj)\n"
    f'  File "{_SITE}/sglang/srt/managers/tokenizer_manager.py", line 2004, in _handle_batch_output\n'
    "    state = self.rid_to_state[rid]\n"
    "            ~~~~~~~~~~~~~~~~~^^^^^\n"
    "KeyError: 'a1b2c3d4e5f6'\n"
)


def tokenizer_lines() -> tuple[str, str]:
    """(the main process's record, its traceback body): ``TokenizerManager hit an exception``."""
    return "TokenizerManager hit an exception: " + _TOKENIZER.splitlines()[0], _after_first(_TOKENIZER)


def nan_assert_lines(version: str) -> tuple[str, str, str]:
    """(raw device-assert text or "", scheduler record, traceback body) of a NaN crash."""
    if not has("crash.nan_detected", version):
        body = (
            _HEAD
            + "    batch_result.next_token_ids = self.model_runner.sample(\n"
            + f'  File "{_SITE}/sglang/srt/layers/sampler.py", line 72, in _preprocess_logits\n'
            + '    raise ValueError("Detected errors during sampling! NaN in the logits.")\n'
            + "ValueError: Detected errors during sampling! NaN in the logits.\n"
        )
        return "", "Scheduler hit an exception: " + body.splitlines()[0], _after_first(body)
    asserts = "".join(
        f"{_SITE}/sglang/srt/utils/async_probe.py:117: _assert_no_nan_kernel: block: [0,0,0], "
        f"thread: [{t},0,0] Assertion `NaN detected! sampler: next_token_logits` failed.\n"
        for t in range(4)
    )
    body = (
        _HEAD
        + "    batch_result.next_token_ids = self.model_runner.sample(\n"
        + f'  File "{_SITE}/sglang/srt/model_executor/model_runner.py", line 2391, in sample\n'
        + "    next_token_ids = self.sampler(\n"
        + "torch.AcceleratorError: CUDA error: device-side assert triggered\n"
        + "Search for `cudaErrorAssert' in "
        + "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\n"
        + "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
        + "below might be incorrect.\n"
    )
    return asserts, "Scheduler hit an exception: " + body.splitlines()[0], _after_first(body)


def died_init_lines(version: str, rank: int, exit_code: int = -9) -> str:
    """The main process's traceback when a scheduler died while loading (printed unstamped)."""
    if not has("crash.scheduler_died_init", version):
        where = "line 897, in _launch_scheduler_processes"
        message = f"RuntimeError: Rank {rank} scheduler is dead. Please check if there are relevant logs."
    else:
        where = "line 2040, in _wait_for_scheduler_ready"
        message = (
            f"RuntimeError: Rank {rank} scheduler died during initialization (exit code: {exit_code}). "
            "If exit code is -9 (SIGKILL), a common cause is the OS OOM killer. "
            "Run `dmesg -T | grep -i oom` to check."
        )
    return (
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        f'  File "{_SITE}/sglang/launch_server.py", line 83, in <module>\n'
        "    run_server(server_args)\n"
        f'  File "{_SITE}/sglang/srt/entrypoints/http_server.py", line 3150, in launch_server\n'
        f'  File "{_SITE}/sglang/srt/entrypoints/engine.py", {where}\n'
        f"{message}\n"
    )


def subprocess_crash_line(rank: int, pid: int, exit_code: int = -11) -> str:
    """0.5.23's subprocess watchdog line (main process, no rank prefix)."""
    return (
        f"Subprocess scheduler_{rank} (pid={pid}) crashed with exit code {exit_code}. "
        "Triggering SIGQUIT for cleanup..."
    )
