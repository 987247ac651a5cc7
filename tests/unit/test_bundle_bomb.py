"""Gzip bombs given to ``replay --bundle``: refused while decompressing, in bounded memory.

Each bomb is a real, complete gzip file (its CRC and length say what it expands to),
built here without ever holding what it expands to: a megabyte of one byte is
compressed once, after a full flush (which makes it independent of what came before),
and that deflate block is written again and again.
"""

from __future__ import annotations

import io
import json
import re
import struct
import subprocess
import sys
import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pytest

from hermesbus.errors import SettingError
from hermesbus.replay.bundle import LIMITS, Limits, read_bundle
from tests.cli_process import clean_env

_MIB = 1 << 20
_GIB = 1 << 30
_BLOCK = 512
_MANIFEST = json.dumps({"format": "hermesbus-bundle", "version": 1, "sessions": ["s1"]}).encode()


class _Gzip:
    """A gzip stream written piece by piece; runs of one byte cost ~1 KB per MiB."""

    def __init__(self, out: BinaryIO) -> None:
        self._out, self._crc, self.size = out, 0, 0
        self._deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
        out.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")  # gzip header, no name

    def literal(self, data: bytes) -> None:
        self._out.write(self._deflate.compress(data))
        self._crc = zlib.crc32(data, self._crc)
        self.size += len(data)

    def run(self, byte: bytes, count: int) -> None:
        """``count`` times ``byte``: whole MiBs spliced in as one block compressed once."""
        self._out.write(self._deflate.flush(zlib.Z_FULL_FLUSH))  # nothing refers back past it
        chunk = byte * _MIB
        once = zlib.compressobj(9, zlib.DEFLATED, -15)
        block = once.compress(chunk) + once.flush(zlib.Z_FULL_FLUSH)
        for _ in range(count // _MIB):
            self._out.write(block)
            self._crc = zlib.crc32(chunk, self._crc)
        self.size += count // _MIB * _MIB
        self.literal(byte * (count % _MIB))

    def close(self) -> None:
        self._out.write(self._deflate.flush())
        self._out.write(struct.pack("<II", self._crc, self.size & 0xFFFFFFFF))


def _header(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.mode = size, kind, 0o644
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def _padding(size: int) -> bytes:
    return b"\0" * (-size % _BLOCK)


def _member(gz: _Gzip, name: str, data: bytes) -> None:
    gz.literal(_header(name, len(data)) + data + _padding(len(data)))


def _run_member(gz: _Gzip, name: str, byte: bytes, size: int) -> None:
    gz.literal(_header(name, size))
    gz.run(byte, size)
    gz.literal(_padding(size))


def _huge_member(gz: _Gzip) -> None:
    """records.jsonl of 2 GiB of newlines: its header says so."""
    _run_member(gz, "records.jsonl", b"\n", 2 * _GIB)


def _newlines(gz: _Gzip) -> None:
    """The bomb the review found (321 KB): records.jsonl of newlines, within the member's
    size, which split into lines held ~8 bytes per byte (2.44 GB)."""
    _run_member(gz, "records.jsonl", b"\n", LIMITS.members["records.jsonl"] - _MIB)


def _pax_header(gz: _Gzip) -> None:
    """A pax header of 1 GiB before records.jsonl (tarfile reads a pax header whole)."""
    head = f"{_GIB} comment=".encode()
    gz.literal(_header("././@PaxHeader", _GIB, tarfile.XHDTYPE) + head)
    gz.run(b"a", _GIB - len(head) - 1)
    gz.literal(b"\n" + _padding(_GIB))
    _member(gz, "records.jsonl", b"")


def _bomb(path: Path, middle: Callable[[_Gzip], None]) -> int:
    """A bundle whose manifest is fine and whose ``middle`` is a bomb; what it expands to."""
    with path.open("wb") as out:
        gz = _Gzip(out)
        _member(gz, "manifest.json", _MANIFEST)
        middle(gz)
        _member(gz, "schemas.json", b"{}")
        _member(gz, "documents.jsonl", b"")
        gz.literal(b"\0" * (2 * _BLOCK))  # the tar's end
        gz.close()
        return gz.size


_PEAK = """
import resource, runpy, sys
sys.argv = ["hermesbus", *sys.argv[1:]]
try:
    runpy.run_module("hermesbus.cli", run_name="__main__", alter_sys=True)
finally:
    print("peak_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""
"""``hermesbus ARGS`` in this process, its peak resident memory printed at exit."""


def _replay_bundle(path: Path, cwd: Path) -> tuple[int, list[str], int]:
    """``hermesbus replay --bundle PATH --shadow``: exit code, error lines, peak KiB."""
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, "replay", "--bundle", str(path), "--shadow"],
        capture_output=True,
        text=True,
        env=clean_env(cwd / "home"),
        cwd=cwd,
        timeout=300,
        check=False,
    )
    lines = done.stderr.splitlines()
    peak = [int(line.split()[1]) for line in lines if line.startswith("peak_kib ")]
    assert len(peak) == 1, done.stderr
    return done.returncode, [line for line in lines if not line.startswith("peak_kib ")], peak[0]


@pytest.mark.timeout(600)  # two commands in subprocesses, on a busy machine
@pytest.mark.parametrize(
    ("middle", "says"),
    [
        (
            _huge_member,
            r"refused, it holds records\.jsonl of 2,147,483,648 bytes \(at most 256 MiB\) once "
            r"decompressed",
        ),
        (_newlines, r"refused, it holds records\.jsonl of more than 200,000 lines once"),
        (_pax_header, r"refused, it holds a tar header of more than 1 MiB once decompressed"),
    ],
    ids=["member-of-2-GiB", "newlines", "pax-header-of-1-GiB"],
)
def test_a_gzip_bomb_is_refused_in_bounded_memory(
    tmp_path: Path, middle: Callable[[_Gzip], None], says: str
) -> None:
    bomb = tmp_path / "bomb.tar.gz"
    expands_to = _bomb(bomb, middle)
    compressed = bomb.stat().st_size
    assert expands_to >= LIMITS.members["records.jsonl"] - _MIB  # what it would cost
    assert compressed < 3 * _MIB  # a few hundred KB to a few MB
    # the same command on a bundle refused at once: imports and start-up, for comparison
    small = tmp_path / "small.tar.gz"
    with tarfile.open(small, "w:gz") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(_MANIFEST)
        tar.addfile(info, io.BytesIO(_MANIFEST))
    code, _, baseline = _replay_bundle(small, tmp_path)
    assert code == 2
    code, errors, peak = _replay_bundle(bomb, tmp_path)
    assert code == 2, errors
    assert len(errors) == 1 and errors[0].startswith(f"error: {bomb}: "), errors
    assert re.search(says, errors[0]), errors[0]
    # bounded: what one chunk and one line cost at most, nowhere near what it expands to
    grown_mib = (peak - baseline) / 1024
    print(f"{bomb.name}: {compressed:,} B -> {expands_to:,} B; peak +{grown_mib:.1f} MiB")
    assert grown_mib < 64, (peak, baseline)


def _bundle(path: Path, members: dict[str, bytes], **extra: tarfile.TarInfo) -> None:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members.items():
            info = extra.get(name) or tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


_FINE = {
    "manifest.json": _MANIFEST,
    "records.jsonl": b"",
    "schemas.json": b"{}",
    "documents.jsonl": b"{}\n" * 10,
}


@pytest.mark.parametrize(
    ("limits", "members", "says"),
    [
        (Limits(total=8 * 1024), _FINE, r"holds more than 8,192 bytes once decompressed"),
        (
            Limits(lines=5),
            _FINE,
            r"documents\.jsonl of more than 5 lines",
        ),
        (
            Limits(line=10),
            {**_FINE, "documents.jsonl": b'{"a": "' + b"x" * 20 + b'"}\n'},
            r"documents\.jsonl with a line longer than",
        ),
        (
            LIMITS,
            {**_FINE, "../evil": b"x"},
            r"it holds '\.\./evil' \(a bundle holds only manifest\.json, records\.jsonl",
        ),
        (LIMITS, {**_FINE, "documents.jsonl": b"[1]\n"}, r"a document is a JSON object"),
    ],
    ids=["total", "lines", "line", "stranger", "not-an-object"],
)
def test_every_limit_is_checked_while_reading(
    tmp_path: Path, limits: Limits, members: dict[str, bytes], says: str
) -> None:
    path = tmp_path / "b.tar.gz"
    _bundle(path, members)
    with pytest.raises(SettingError, match=says):
        read_bundle(path, limits)


def test_a_bundle_within_the_limits_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "b.tar.gz"
    _bundle(path, _FINE)
    read = read_bundle(path)
    assert read.documents == ({},) * 10 and read.records == ()


def test_a_link_or_a_second_copy_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.tar.gz"
    link = tarfile.TarInfo("records.jsonl")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    _bundle(path, _FINE, **{"records.jsonl": link})
    with pytest.raises(SettingError, match="records.jsonl is not a plain file"):
        read_bundle(path)
    with tarfile.open(path, "w:gz") as tar:
        for name, data in [*_FINE.items(), ("manifest.json", _MANIFEST)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(SettingError, match=r"it holds 'manifest\.json' \(twice\)"):
        read_bundle(path)
