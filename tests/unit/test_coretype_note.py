"""``distnet info`` warns when OPENBLAS_CORETYPE holds OpenBLAS to kernels older than the CPU."""
from distnet.experiments.stack import coretype_note


def test_an_avx2_coretype_on_an_avx512_cpu_is_named():
    note = coretype_note({"OPENBLAS_CORETYPE": "Haswell"}, {"avx2", "avx512f"})
    assert "OPENBLAS_CORETYPE=Haswell" in note and "AVX-512" in note and "unset it" in note


def test_no_note_without_the_variable_or_without_avx512_or_for_a_matching_kernel():
    assert coretype_note({}, {"avx512f"}) == ""
    assert coretype_note({"OPENBLAS_CORETYPE": "Haswell"}, {"avx2"}) == ""
    assert coretype_note({"OPENBLAS_CORETYPE": "SkylakeX"}, {"avx512f"}) == ""
