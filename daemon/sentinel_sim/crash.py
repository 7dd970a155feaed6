"""The log tail a dying SGLang v0.5.9 server leaves behind, per cause.

A supervisor can only classify a crash from the log (the exit is always SIGKILL), so each cause
ends with the lines a real server prints: the scheduler's ``Scheduler hit an exception:`` record
with a Python traceback (continuation lines carry no timestamp), then the main process's SIGQUIT
line. File paths and line numbers are those of the 0.5.9 wheel.
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = ["CrashKind", "crash_lines"]

CrashKind = Literal["exception", "oom", "watchdog", "startup"]

_SITE: Final = "/usr/local/lib/python3.12/dist-packages"

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


def crash_lines(kind: CrashKind, *, used_gb: float = 93.8, total_gb: float = 94.97) -> tuple[str, str]:
    """(the scheduler's exception record, the traceback body) for a crash of ``kind``."""
    if kind == "startup":
        return "Scheduler hit an exception: " + _STARTUP.splitlines()[0], _after_first(_STARTUP)
    if kind == "oom":
        body = _HEAD + _FORWARD + _oom(used_gb, total_gb)
    elif kind == "watchdog":
        return ("Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", "")
    else:
        body = _HEAD + _SAMPLER
    return "Scheduler hit an exception: " + body.splitlines()[0], _after_first(body)


def _after_first(text: str) -> str:
    return text.split("\n", 1)[1] if "\n" in text else ""
