"""The languages llguidance gives JSON Schema string `format`s, as regexes `format_dfa` reads.

llguidance (1.9.1, `parser/src/json/formats.rs`) turns `{"type": "string", "format": F}` into a string
lexeme over one regex per format. The regexes below describe the same languages, written from named
parts; `tests/constraints/test_format_masks.py` holds them to llguidance's own masks over the whole
vocabulary at every state a random walk visits, so a later llguidance that changes a format fails there
(and `FormatTable` stops reusing for a format whose masks stop matching at run time).
"""

from __future__ import annotations

HEX = "[0-9a-fA-F]"
_H16 = HEX + "{1,4}"
_OCTET = "(?:[0-9]|[1-9][0-9]|25[0-5]|2[0-4][0-9]|1[0-9][0-9])"
_TIME = ("(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\\.[0-9]+)?"
         "(?:[zZ]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])")
_MONTH_DAY = ("(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
              "|02-(?:0[1-9]|1[0-9]|2[0-9]))")
_DATE = "[0-9]{4}-" + _MONTH_DAY
_N = "[0-9]+"
_DUR_TIME = f"T(?:{_N}H(?:{_N}M(?:{_N}S)?)?|{_N}M(?:{_N}S)?|{_N}S)"
_DUR_DATE = f"(?:{_N}Y(?:{_N}M(?:{_N}D)?)?|{_N}M(?:{_N}D)?|{_N}D)"
_LABEL = "[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_ATEXT = "[a-zA-Z0-9!#$%&'*+\\-/=?\\^_`{|}~]"
_IPV6 = "|".join([
    f"(?:{_H16}:){{7}}{_H16}",
    f"::(?:{_H16}:){{0,5}}{_H16}:{_H16}",
    f"(?:{_H16})?::(?:{_H16}:){{0,4}}{_H16}:{_H16}",
    *(f"(?:(?:{_H16}:){{0,{k}}}{_H16})?::(?:{_H16}:){{0,{3 - k + 1}}}{_H16}:{_H16}" for k in (1, 2)),
    f"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_H16}:{_H16}",
    f"(?:(?:{_H16}:){{0,4}}{_H16})?::{_H16}:{_H16}",
    f"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
    f"(?:(?:{_H16}:){{0,6}}{_H16})?::",
])
_UNRESERVED_SUB = "a-zA-Z0-9\\-._~!$&'()*+,;="  # RFC 3986 unreserved and sub-delims, inside a class
_PCT = f"%{HEX}{{2}}"
_PCHAR = f"(?:[{_UNRESERVED_SUB}:@]|{_PCT})"
_URI_IPV6 = "|".join([
    f"(?:{_H16}:){{7}}{_H16}",
    f"(?:{_H16}:){{1,7}}:",
    f"(?:{_H16}:){{1,6}}:{_H16}",
    *(f"(?:{_H16}:){{1,{k}}}(?::{_H16}){{1,{7 - k}}}" for k in (5, 4, 3, 2)),
    f"{_H16}:(?::{_H16}){{1,6}}",
    f":(?::{_H16}){{1,7}}",
    "::",
    f"v{HEX}+\\.[{_UNRESERVED_SUB}:]+",
])
_URI_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_URI_HOST = f"(?:\\[(?:{_URI_IPV6})\\]|(?:{_URI_OCTET}\\.){{3}}{_URI_OCTET}|(?:[{_UNRESERVED_SUB}]|{_PCT})*)"
_URI_HIER = (f"(?://(?:(?:[{_UNRESERVED_SUB}:]|{_PCT})*@)?{_URI_HOST}(?::[0-9]*)?(?:/{_PCHAR}*)*"
             f"|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?|{_PCHAR}+(?:/{_PCHAR}*)*|)")
_URI_TAIL = f"(?:[{_UNRESERVED_SUB}:@/?]|{_PCT})*"

FORMAT_REGEX: dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": _DATE + "[tT]" + _TIME,
    "duration": f"P(?:{_DUR_DATE}(?:{_DUR_TIME})?|{_DUR_TIME}|{_N}W)",
    "email": f"{_ATEXT}+(?:\\.{_ATEXT}+)*@(?:{_LABEL}(?:\\.{_LABEL})*|\\[(?:{_OCTET}\\.){{3}}{_OCTET}\\])",
    "hostname": ("[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
                 "(?:\\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*"),
    "ipv4": f"(?:{_OCTET}\\.){{3}}{_OCTET}",
    "ipv6": _IPV6,
    "uuid": f"{HEX}{{8}}-{HEX}{{4}}-{HEX}{{4}}-{HEX}{{4}}-{HEX}{{12}}",
    "uri": f"[a-zA-Z][a-zA-Z0-9+\\-.]*:{_URI_HIER}(?:\\?{_URI_TAIL})?(?:#{_URI_TAIL})?",
}
