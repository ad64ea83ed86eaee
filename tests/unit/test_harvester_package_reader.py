"""Members read from a dump package: bytes as stored, checked against the directory."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from harvester.package_reader import CHUNK_SIZE, MemberError, PackageReader

TEXT = b"a bitstream " * 1000


def package(tmp_path: Path, members: dict[str, bytes], method: int) -> Path:
    path = tmp_path / "package.zip"
    with zipfile.ZipFile(path, "w", compression=method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_members_read_back_as_written(tmp_path: Path, method: int) -> None:
    members = {"manifest.xml": b"<urlset/>", "r/a.txt": TEXT, "r/empty": b"", "r/é.txt": b"e"}
    with PackageReader(package(tmp_path, members, method)) as reader:
        assert {name: b"".join(reader.chunks(name)) for name in members} == members


def test_a_missing_member_is_named(tmp_path: Path) -> None:
    path = package(tmp_path, {"a": b"x"}, zipfile.ZIP_STORED)
    with PackageReader(path) as reader, pytest.raises(MemberError, match="no member 'b'"):
        reader.chunks("b")


def test_a_corrupted_member_fails_its_crc(tmp_path: Path) -> None:
    path = package(tmp_path, {"r/a.txt": TEXT}, zipfile.ZIP_STORED)
    data = bytearray(path.read_bytes())
    data[data.index(b"a bitstream")] ^= 0xFF
    path.write_bytes(bytes(data))

    with PackageReader(path) as reader, pytest.raises(MemberError, match="bad CRC-32"):
        b"".join(reader.chunks("r/a.txt"))


def test_a_local_header_naming_another_file_is_refused(tmp_path: Path) -> None:
    path = package(tmp_path, {"r/a.txt": b"alpha", "r/b.txt": b"bravo"}, zipfile.ZIP_STORED)
    with PackageReader(path) as reader:
        reader.members["r/a.txt"].header_offset = reader.members["r/b.txt"].header_offset
        with pytest.raises(MemberError, match="names another file"):
            b"".join(reader.chunks("r/a.txt"))


def test_an_encrypted_member_is_refused(tmp_path: Path) -> None:
    with PackageReader(package(tmp_path, {"a": b"x"}, zipfile.ZIP_STORED)) as reader:
        reader.members["a"].flag_bits |= 0x1
        with pytest.raises(MemberError, match="encrypted"):
            reader.chunks("a")


def test_a_deflated_bomb_is_inflated_a_bounded_amount_at_a_time(tmp_path: Path) -> None:
    bomb = b"\0" * (20 * CHUNK_SIZE)  # compresses about a thousandfold
    with PackageReader(package(tmp_path, {"bomb": bomb}, zipfile.ZIP_DEFLATED)) as reader:
        sizes = [len(chunk) for chunk in reader.chunks("bomb")]

    assert max(sizes) <= CHUNK_SIZE
    assert sum(sizes) == len(bomb)
