"""A missing optional package is one MissingDependencyError, worded once: the
checkout's extra to install, never the published package's name alone."""

import pytest

from loaderx._extras import require_extra
from loaderx.errors import MissingDependencyError


def test_a_missing_module_names_the_checkouts_extra_and_the_top_module():
    with pytest.raises(MissingDependencyError) as e:
        require_extra("no_such_loaderx_dep.sub", "loaderx.x needs it", "x", " (and Java)")
    assert str(e.value) == (
        "loaderx.x needs it: run `pip install -e '.[x]'` in the loaderx checkout (and Java)"
    )
    assert e.value.name == "no_such_loaderx_dep"
    assert isinstance(e.value, ImportError)


def test_an_installed_module_passes():
    require_extra("json", "unused", "unused")
