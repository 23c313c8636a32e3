import pytest

from replication.registry import Registry, UnknownNameError


def test_register_get_names_and_errors():
    reg = Registry("widget")

    @reg.register("b")
    class B:
        pass

    reg.register("a", 1)
    assert reg.get("b") is B and reg["a"] == 1
    assert reg.names() == ["a", "b"] and list(reg) == ["a", "b"] and len(reg) == 2
    assert "a" in reg and "c" not in reg
    with pytest.raises(UnknownNameError, match=r"unknown widget 'c'; known: \['a', 'b'\]"):
        reg.get("c")
    with pytest.raises(ValueError):  # UnknownNameError is also a ValueError
        reg.get("c")
    with pytest.raises(KeyError):
        reg["c"]
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("a", 2)
    with pytest.raises(ValueError, match="non-empty string"):
        reg.register("", 3)
