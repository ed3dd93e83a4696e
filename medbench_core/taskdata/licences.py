"""Licence normalisation and the allowlist that gates curated tasks.

Sources spell licences many ways ("CC BY 4.0", "cc-by-nc-nd", "Creative Commons Attribution
4.0 International", "ODC-BY", a creativecommons.org URL, None). Readers call
:func:`normalise_licence` once per record so everything downstream compares canonical,
SPDX-like ids: ``CC0-1.0``, ``CC-BY-4.0``, ``CC-BY-SA-4.0``, ``CC-BY-NC-ND`` (no version when
the source gives none), ``ODC-By-1.0``, ``ODC-PDDL-1.0``, ``Apache-2.0``, ``MIT``,
``public-domain`` and ``unknown`` when the source states nothing. A value that is not
recognised is returned stripped but otherwise as given, so the gate fails on it and names it
instead of guessing.

Gate rule (:class:`LicencePolicy`): a record passes when its licence is in the allowlist
(default :data:`DEFAULT_ALLOWLIST`, the permissive licences). A task marked research-only
also admits ``unknown`` and Creative Commons NonCommercial / NoDerivatives licences; it
never admits an unrecognised value.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

UNKNOWN = "unknown"
PUBLIC_DOMAIN = "public-domain"

_CC_VERSIONS = ("1.0", "2.0", "2.5", "3.0", "4.0")


def _cc_family(code: str) -> tuple[str, ...]:
    """``CC-BY`` -> (``CC-BY``, ``CC-BY-1.0``, ..., ``CC-BY-4.0``)."""
    return (code, *(f"{code}-{v}" for v in _CC_VERSIONS))


# Permissive: redistribution and any use, at most attribution or share-alike required.
PERMISSIVE: frozenset[str] = frozenset(
    {
        "CC0-1.0",
        *_cc_family("CC-BY"),
        *_cc_family("CC-BY-SA"),
        "ODC-By-1.0",
        "ODC-PDDL-1.0",
        "Apache-2.0",
        "MIT",
        PUBLIC_DOMAIN,
    }
)

# Non-commercial or no-derivatives: usable for research only.
RESTRICTED: frozenset[str] = frozenset({*_cc_family("CC-BY-NC"), *_cc_family("CC-BY-NC-SA"), *_cc_family("CC-BY-ND"), *_cc_family("CC-BY-NC-ND")})

DEFAULT_ALLOWLIST: frozenset[str] = PERMISSIVE

# Values that mean "the source states no licence".
_NO_LICENCE = {"", "none", "null", "nan", "na", "n a", "unknown", "unspecified", "not specified", "no licence", "no license"}

_CC_WORDS = {
    "by": "BY",
    "attribution": "BY",
    "sa": "SA",
    "sharealike": "SA",
    "share alike": "SA",
    "nc": "NC",
    "noncommercial": "NC",
    "non commercial": "NC",
    "nd": "ND",
    "noderivatives": "ND",
    "noderivs": "ND",
    "no derivatives": "ND",
    "no derivs": "ND",
}

_VERSION = re.compile(r"^(\d)(?:\.(\d))?\Z")


def _words(raw: str) -> str:
    s = unicodedata.normalize("NFKC", raw).strip().lower()
    s = re.sub(r"^https?://(www\.)?", "", s)
    # Keep dots inside version numbers ("2.5") and drop every other separator.
    s = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", s)
    s = re.sub(r"[\s_\-/,;:()\[\]]+", " ", s)
    return s.strip()


def _version(tokens: list[str]) -> str | None:
    for t in tokens:
        m = _VERSION.match(t)
        if m:
            return f"{m.group(1)}.{m.group(2) or '0'}"
    return None


def _creative_commons(s: str) -> str | None:
    tokens = s.split()
    if "cc0" in tokens or "publicdomain zero" in s or s.startswith("cc zero") or "creative commons zero" in s:
        return "CC0-1.0"
    if "creativecommons org publicdomain mark" in s:
        return PUBLIC_DOMAIN
    is_cc = tokens[:1] == ["cc"] or "creative commons" in s or "creativecommons org licenses" in s
    if not is_cc:
        return None
    rest = re.sub(r"creativecommons org licenses|creative commons|^cc\b|\binternational\b|\blicen[cs]e\b|\bgeneric\b|\bunported\b", " ", s)
    # Multi-word spellings first so "share alike" is not read as two unknown words.
    flags: set[str] = set()
    for phrase in sorted(_CC_WORDS, key=len, reverse=True):
        pat = rf"\b{re.escape(phrase)}\b"
        if re.search(pat, rest):
            flags.add(_CC_WORDS[phrase])
            rest = re.sub(pat, " ", rest)
    leftover = [t for t in rest.split() if not _VERSION.match(t)]
    if "BY" not in flags or leftover or ("SA" in flags and "ND" in flags):
        return None
    parts = ["CC-BY"] + [f for f in ("NC", "ND", "SA") if f in flags]
    # SPDX order is NC before SA / ND: CC-BY-NC-SA-4.0, CC-BY-NC-ND-4.0.
    code = "-".join(parts)
    v = _version(s.split())
    return f"{code}-{v}" if v else code


def normalise_licence(raw: object) -> str:
    """Canonical SPDX-like id of a licence as a source spells it; ``unknown`` for None/empty.

    >>> normalise_licence("cc-by-nc-nd"), normalise_licence("CC BY 4.0"), normalise_licence(None)
    ('CC-BY-NC-ND', 'CC-BY-4.0', 'unknown')

    Unrecognised values come back stripped but unchanged so that a gate names them.
    """
    if raw is None or (isinstance(raw, float) and math.isnan(raw)):
        return UNKNOWN
    text = str(raw).strip()
    s = _words(text)
    if s in _NO_LICENCE:
        return UNKNOWN
    cc = _creative_commons(s)
    if cc:
        return cc
    compact = s.replace(" ", "")
    if compact in {"publicdomain", "pd", "publicdomainmark", "usgovernmentwork"}:
        return PUBLIC_DOMAIN
    if compact in {"odcby", "odcby1.0", "odcattribution", "opendatacommonsattributionlicense", "opendatacommonsattributionlicence"} or (
        compact.startswith("opendatacommonsattribution") and "1.0" in compact
    ):
        return "ODC-By-1.0"
    if compact in {"pddl", "odcpddl", "odcpddl1.0", "pddl1.0"} or compact.startswith("opendatacommonspublicdomaindedication"):
        return "ODC-PDDL-1.0"
    if compact in {"odbl", "odbl1.0", "odcodbl", "odcodbl1.0"}:
        return "ODbL-1.0"
    if re.fullmatch(r"apache(license)?(version)?2(\.0)?", compact) or compact in {"apachelicense2.0", "apache2"}:
        return "Apache-2.0"
    if compact in {"mit", "mitlicense", "mitlicence", "expat"}:
        return "MIT"
    return text


@dataclass(frozen=True)
class LicencePolicy:
    """The licence allowlist held in configuration.

    ``allowlist`` holds canonical ids (give any spelling to :meth:`from_config`). A task
    marked research-only additionally admits ``unknown`` and the NC / ND licences.
    """

    allowlist: frozenset[str] = DEFAULT_ALLOWLIST

    @classmethod
    def from_config(cls, allowlist: Iterable[str] | None = None) -> "LicencePolicy":
        """Policy from a configured list of licences (any spelling, normalised here).

        None or an empty list gives the default: a catalogue that omits the key reads as ``()``,
        and an allowlist that admits nothing would be a misconfiguration, not a policy.
        """
        entries = frozenset(normalise_licence(x) for x in allowlist or ())
        return cls(entries) if entries else cls()

    def allowed(self, research_only: bool = False) -> frozenset[str]:
        """Every canonical id the gate accepts for a task with this research-only flag."""
        if research_only:
            return self.allowlist | RESTRICTED | {UNKNOWN}
        return self.allowlist

    def allows(self, licence: object, research_only: bool = False) -> bool:
        """True when a record with this licence may enter a task with this research-only flag."""
        return normalise_licence(licence) in self.allowed(research_only)

    def needs_research_only(self, licence: object) -> bool:
        """True when the licence passes only because the task is research-only."""
        return not self.allows(licence) and self.allows(licence, research_only=True)


DEFAULT_POLICY = LicencePolicy()
