"""GLM5_NVFP4_TABLE is consistent: what it renders is never what it warns about."""

from __future__ import annotations

import pytest

from sglang_sentinel.sglang.launch_facts import GLM5_NVFP4_TABLE, dsa_verdicts, glm5_choice

VERSIONS = [f"0.5.{p}" for p in range(0, 30)] + ["0.6.0", "1.0.0", None, "garbage"]


@pytest.mark.parametrize("sm_arch", [80, 89, 90, 100, 103, 120, 121])
def test_the_rendered_row_never_hits_a_known_bad_row(sm_arch: int) -> None:
    for version in VERSIONS:
        row = glm5_choice(version, sm_arch)
        assert row.verdict != "known_bad"
        prefill, decode = row.backends
        verdicts = dsa_verdicts(version, sm_arch, prefill, decode, row.kv_cache_dtype)
        # Only the KV left to SGLang on a non-SM12 GPU may hit something: no row covers those.
        assert verdicts.bad == (), (version, sm_arch, row.key, [b.key for b in verdicts.bad])


def test_rows_per_version_on_sm120() -> None:
    keys = {v: glm5_choice(v, 120).key for v in ("0.5.9", "0.5.11", "0.5.12", "0.5.18", "0.5.19", "0.5.23")}
    assert keys == {
        "0.5.9": "glm5.sm120.trtllm_bf16",
        "0.5.11": "glm5.sm120.trtllm_bf16",
        "0.5.12": "glm5.sm120.none_known",
        "0.5.18": "glm5.sm120.none_known",
        "0.5.19": "glm5.sm120.tilelang_bf16",
        "0.5.23": "glm5.sm120.tilelang_bf16",
    }
    assert glm5_choice("0.9.0", 120).key == "glm5.sm120.tilelang_bf16"  # unknown newer: newest known
    assert glm5_choice("0.5.23", 90).key == "glm5.other_arch"


def test_sglang_defaults_are_filled_in_before_judging() -> None:
    # Nothing passed on SM120 / 0.5.23: SGLang picks fp8_e4m3 KV and, for GLM, flashinfer_sparse_mla:
    # its own supported SM12x configuration, not a known-bad one.
    v = dsa_verdicts("0.5.23", 120, "", "", "")
    assert v.effective == ("flashinfer_sparse_mla", "flashinfer_sparse_mla", "fp8_e4m3")
    assert v.bad == ()
    # bf16 with the backends left to SGLang: its bf16 default decodes with trtllm (known-bad).
    bf16 = dsa_verdicts("0.5.23", 120, "", "", "bf16")
    assert bf16.effective[:2] == ("flashmla_sparse", "trtllm")
    assert [b.key for b in bf16.bad] == ["glm5.sm120.trtllm_unsupported"]
    # 0.5.9: trtllm is the deployment's finding, flashmla_* gave garbage.
    assert dsa_verdicts("0.5.9", 120, "trtllm", "trtllm", "bf16").bad == ()
    assert [b.key for b in dsa_verdicts("0.5.9", 120, "", "", "bf16").bad] == ["glm5.sm120.flashmla_garbage"]


def test_every_row_cites_a_source() -> None:
    assert len({r.key for r in GLM5_NVFP4_TABLE}) == len(GLM5_NVFP4_TABLE)
    for row in GLM5_NVFP4_TABLE:
        assert row.source.strip(), row.key
        cited: tuple[str, ...] = ("sglang/", "sgl-project/sglang#", "flashinfer-ai/flashinfer#")
        cited += ("deployment finding", "dsa_defaults")
        assert any(s in row.source for s in cited), row.key


def test_fp8_kv_on_sm120_per_version() -> None:
    # 0.5.9: fp8 KV with trtllm is the deployment's own launch (SGLang's auto dtype): not bad.
    assert dsa_verdicts("0.5.9", 120, "trtllm", "trtllm", "").bad == ()
    assert dsa_verdicts("0.5.9", 120, "trtllm", "trtllm", "fp8_e4m3").bad == ()
    # 0.5.19+: GLM + fp8 KV accepts only flashinfer_sparse_mla (and triton_sparse_mla prefill) ...
    assert dsa_verdicts("0.5.23", 120, "triton_sparse_mla", "flashinfer_sparse_mla", "fp8_e4m3").bad == ()
    refused = dsa_verdicts("0.5.23", 120, "tilelang", "tilelang", "auto")
    assert [(b.key, b.effect) for b in refused.bad] == [("glm5.sm120.fp8_kv_backend", "refused")]
    assert dsa_verdicts("0.5.23", 120, "tilelang", "tilelang", "bf16").bad == ()
    # ... a rule about GLM only (another DSA model with fp8 KV is not refused) ...
    assert dsa_verdicts("0.5.23", 120, "tilelang", "tilelang", "fp8_e4m3", glm=False).bad == ()
    # ... and flashinfer_sparse_mla takes nothing but fp8 KV.
    bf16 = dsa_verdicts("0.5.23", 120, "flashinfer_sparse_mla", "flashinfer_sparse_mla", "bf16")
    assert [b.key for b in bf16.bad] == ["glm5.sm120.flashinfer_sparse_mla_bf16"]
    # Other architectures: no SM12x rule.
    assert dsa_verdicts("0.5.23", 100, "tilelang", "tilelang", "fp8_e4m3").bad == ()
