"""``model.dtype_without_bf16`` (config/cpu_dtype.py): a CPU profile's bfloat16 becomes the named
dtype on a CPU without native bf16, when the profile is loaded, so the key and config.json hold
the dtype the run trains in."""

from __future__ import annotations

import pytest

from replication.config import ConfigError, load_profile
from replication.config import cpu_dtype
from replication.config.cpu_dtype import cpu_has_bf16, resolve_cpu_dtype

AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
AVX512_BF16 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"
AMX = "processor\t: 0\nflags\t\t: avx2 avx512f amx_tile amx_bf16\n"
ARM_BF16 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"


@pytest.mark.parametrize("text,native", [(AVX2, False), (AVX512_BF16, True), (AMX, True), (ARM_BF16, True)])
def test_native_bf16_is_read_from_the_cpu_flags(tmp_path, text, native):
    f = tmp_path / "cpuinfo"
    f.write_text(text)
    assert cpu_has_bf16(str(f)) is native


def test_no_cpuinfo_means_no_native_bf16(tmp_path):
    assert cpu_has_bf16(str(tmp_path / "absent")) is False


@pytest.mark.parametrize("native", [True, False])
def test_a_rehearsal_trains_in_bf16_only_where_the_cpu_computes_it(monkeypatch, native):
    monkeypatch.setattr(cpu_dtype, "cpu_has_bf16", lambda: native)
    for name in ("rehearsal-vip", "rehearsal-dynamo", "rehearsal-gdro"):
        cfg = load_profile(name)
        assert cfg.model.dtype_without_bf16 == "float32", name
        assert cfg.model.dtype == ("bfloat16" if native else "float32"), name


def test_only_a_bf16_cpu_policy_with_the_key_set_is_replaced(monkeypatch):
    monkeypatch.setattr(cpu_dtype, "cpu_has_bf16", lambda: False)
    assert load_profile("paper-vip").model.dtype == "bfloat16"  # cuda: never
    assert load_profile("paper-vip", {"model.device": "cpu"}).model.dtype == "bfloat16"  # key unset
    assert load_profile("smoke", {"model.dtype_without_bf16": "float32"}).model.dtype == "float32"
    cfg = load_profile("smoke", {"model.dtype": "bfloat16", "model.dtype_without_bf16": "float16"})
    assert cfg.model.dtype == "float16"
    assert resolve_cpu_dtype(load_profile("smoke", {"model.dtype": "bfloat16"}), has_bf16=False).model.dtype == "bfloat16"


@pytest.mark.parametrize("value", ["bfloat16", "int8"])
def test_a_bad_fallback_is_refused_before_compute(value):
    with pytest.raises(ConfigError, match="model.dtype_without_bf16"):
        load_profile("smoke", {"model.dtype_without_bf16": value})
