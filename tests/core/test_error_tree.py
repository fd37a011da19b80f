"""Every error of kafka-direct's tree is public and drawn: in ``kafka_direct.__all__``, in
``kafka_direct.errors.__all__`` and in the tree the ``errors`` module's docstring draws, under
its own parent."""

import re

import kafka_direct
from kafka_direct import errors
from kafka_direct.errors import KafkaDirectError


def _tree():
    """Every class the docstring draws -> the class it is drawn under."""
    drawn, parents = {}, []
    for line in errors.__doc__.splitlines():
        found = re.match(r"^(\s*(?:[│ ]   )*)(?:[├└]── )?([A-Z]\w+Error)\b", line)
        if not found or ("──" not in line and found.group(2) != "KafkaDirectError"):
            continue
        depth = len(found.group(1)) // 4
        name = found.group(2)
        del parents[depth:]
        drawn[name] = parents[-1] if parents else None
        parents.append(name)
    return drawn


def _subclasses(cls):
    for sub in cls.__subclasses__():
        if sub.__module__ == errors.__name__:
            yield sub
        yield from _subclasses(sub)


ALL = sorted({cls.__name__ for cls in _subclasses(KafkaDirectError)} | {"KafkaDirectError"})


def test_every_error_is_in_the_packages_names():
    assert [name for name in ALL if name not in kafka_direct.__all__] == []
    assert all(getattr(kafka_direct, name) is getattr(errors, name) for name in ALL)


def test_every_error_is_in_the_modules_names():
    assert [name for name in ALL if name not in errors.__all__] == []


def test_every_error_is_drawn_under_its_parent():
    drawn = _tree()
    assert [name for name in ALL if name not in drawn] == []
    for name in ALL:
        cls = getattr(errors, name)
        parent = next((base.__name__ for base in cls.__bases__
                       if issubclass(base, KafkaDirectError)), None)
        assert drawn[name] == parent, name


def test_the_tree_reader_sees_what_is_drawn():
    drawn = _tree()
    assert drawn["KafkaDirectError"] is None
    assert drawn["DataLossError"] == "KafkaReadError"
    assert drawn["BadRecordError"] == "RecordError"
