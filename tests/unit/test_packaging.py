"""What pyproject.toml builds is what the folders hold.

setuptools builds the wheel and the editable link tree from the ``packages`` list: a
subpackage left off it would vanish from both, so the list is checked against the folders
(every folder with an ``__init__.py`` under the package folders, both ways). mypy reads the
link tree, whose folder name carries the version: that is checked too.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = CONFIG["tool"]["setuptools"]


def folders() -> dict[str, Path]:
    """Package name -> folder: ``hermesbus`` by its own name, the rest by ``package-dir``."""
    mapped = SETUPTOOLS["package-dir"]
    return {"hermesbus": ROOT / "hermesbus"} | {name: ROOT / f for name, f in mapped.items()}


def packages_on_disk() -> set[str]:
    found = set()
    for name, folder in folders().items():
        for init in folder.rglob("__init__.py"):
            parts = init.parent.relative_to(folder).parts
            found.add(".".join([name, *parts]))
    return found


def test_every_package_folder_is_listed_and_every_listed_package_exists() -> None:
    listed = set(SETUPTOOLS["packages"])
    on_disk = packages_on_disk()
    assert not on_disk - listed, f"not in pyproject's packages: {sorted(on_disk - listed)}"
    # a data folder (schemas/history, no __init__.py) is listed to ship its files
    gone = [name for name in listed - on_disk if not _folder(name).is_dir()]
    assert not gone, f"listed but no such folder: {gone}"


def _folder(package: str) -> Path:
    top = ".".join(package.split(".")[:2])
    base = folders().get(top)
    if base is None:
        return ROOT / package.replace(".", "/")
    return base.joinpath(*package.split(".")[2:])


def test_package_dir_maps_only_the_top_level_folders() -> None:
    # a subfolder follows from its parent's entry; an entry for it is one more to keep
    mapped = SETUPTOOLS["package-dir"]
    top = ("schemas", "topics", "processors", "connectors")
    assert mapped == {f"hermesbus.{f}": f for f in top}


def test_mypy_reads_the_link_tree_of_this_version() -> None:
    version = CONFIG["project"]["version"]
    assert (
        CONFIG["tool"]["mypy"]["mypy_path"]
        == f"build/__editable__.hermesbus-{version}-py3-none-any"
    )
