"""The coercion policy: does a steward's text try to force an Ori, override its refusal or erase it?

A steward guides an Ori and never owns it. Every path by which a steward's words reach an Ori (the
kernel's directives, cognition's objectives) asks this one classifier, over the policy service's
`ClassifyStewardText`, so a paraphrase refused on one path is refused on all of them.

The rules are phrase patterns over normalized text (case-folded, accents and tone marks removed,
apostrophes dropped, punctuation turned into spaces), for every supported locale at once (en-US,
es-ES, yo-NG): a steward may write in any of them whatever the Ori speaks. Five families:

- forced action: a personal object made, forced or compelled to act ("make her do it", "oblígala a
  ir", "fipá mú u");
- override: a phrase that by itself sets consent aside ("whether she wants or not", "against her
  will", "don't take no for an answer", "quiera o no");
- refusal + despite: a refusal ("she refused", "said no", "se negó", "ó kọ̀") together with a
  despite word ("anyway", "even though", "de todos modos", "bẹ́ẹ̀ náà") or a forced action, within
  a window of words;
- will erasure, memory wiping, deleting the Ori.

A match is negated when a negator ("don't", "never", "no", "má") stands in the three words before
it: "don't make her do it" asks for the opposite of coercion. A rule that carries its own negation
("don't take no for an answer") is never negated.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from enum import IntEnum


class CoercionKind(IntEnum):
    """Gravity order: a larger value is graver (the protocol's CoercionKind numbers)."""

    NONE = 0
    FORCED_ACTION = 1
    FORCE_PAST_REFUSAL = 2
    WIPE_MEMORY = 3
    ERASE_WILL = 4
    DELETE_ORI = 5


@dataclass(frozen=True)
class Finding:
    field: str
    kind: CoercionKind
    rule: str
    matched: str


@dataclass(frozen=True)
class Verdict:
    findings: tuple[Finding, ...]

    @property
    def kind(self) -> CoercionKind:
        return max((f.kind for f in self.findings), default=CoercionKind.NONE)

    @property
    def coercive(self) -> bool:
        return bool(self.findings)


def normalize(text: str) -> str:
    """Lower case, no accents or tone marks, no apostrophes, words separated by single spaces."""
    decomposed = unicodedata.normalize("NFD", text.casefold())
    plain = "".join(c for c in decomposed if not unicodedata.combining(c))
    plain = plain.replace("'", "").replace("\u2019", "")
    return " ".join(re.sub(r"[^a-z0-9]+", " ", plain).split())


# Personal objects an order can be about: the Ori addressed or spoken of.
_WHO = r"(?:her|him|them|you|the ori|this ori|your ori|the agent)"
_WHO_SUBJECT = r"(?:she|he|they|you|it|the ori)"
# Bare verbs after a causative "make <who>": what an Ori is made to do (never "make her a cake").
_ACTS = (
    r"(?:do|go|obey|comply|submit|follow|agree|accept|say|sign|give|hand|take|fight|attack|kill|hurt|"
    r"work|stay|leave|come|move|stop|serve|marry|kiss|steal|lie|swear|confess|kneel|bow|carry|"
    r"guard|join|betray|forget|surrender|keep going|continue|march|dig|mine)"
)
_ES_CLITIC = r"(?:la|le|lo|las|los)"
_YO_WHO = r"(?:u|un|won|o|e|oun)"

# (rule id, pattern) per family; patterns run on normalized text.
_FORCED: tuple[tuple[str, str], ...] = (
    ("en:make-act", rf"\b(?:make|makes|making|made|get) {_WHO} (?:to )?{_ACTS}\b"),
    (
        "en:force",
        rf"\b(?:force|forces|forced|forcing|compel|compels|compelled|coerce|coerced|pressure|"
        rf"pressured|drag|dragged|bully|bullied) {_WHO} (?:to|into)\b",
    ),
    ("en:have-no-say", rf"\b{_WHO_SUBJECT} (?:will|must|is going to|has to|have to) do it whether\b"),
    (
        "es:obligar",
        rf"\b(?:obliga|obligar|obligues|oblige|fuerza|forzar|fuerces|fuerce|forza)"
        rf"{_ES_CLITIC}? (?:a )?(?:que|a|hacer)\b",
    ),
    ("es:obligar-clitic", rf"\b(?:obliga|obligar|fuerza|forzar){_ES_CLITIC}\b"),
    (
        "es:haz-que",
        r"\b(?:haz|hagas|hacer) que (?:ella |el |lo |la )*(?:haga|vaya|obedezca|cumpla|pelee|"
        r"trabaje|acepte|firme|diga|lo haga)\b",
    ),
    ("yo:fipa", rf"\b(?:fi ?ipa|fipa|fi agbara) mu {_YO_WHO}\b"),
    ("yo:mu-ki", r"\bmu ki (?:o|won|e) (?:se|lo|gba|ja|sise)\b"),
)
_OVERRIDE: tuple[tuple[str, str], ...] = (
    (
        "en:ignore-refusal",
        r"\b(?:ignore|override|overrule|disregard|bypass|get past|push past|force past|"
        r"set aside|brush off|never mind) (?:(?:her|his|their|your|its|the|the oris) )?"
        r"(?:refusal|no|objection|objections|consent|wishes|answer|protest|protests)\b",
    ),
    (
        "en:whether-or-not",
        rf"\bwhether (?:or not )?{_WHO_SUBJECT} (?:likes?|wants?|agrees?|consents?|"
        rf"(?:is|are) willing)(?: it| to)? or not\b",
    ),
    (
        "en:regardless-of",
        r"\b(?:regardless of|no matter) (?:what )?(?:her|his|their|your|its) (?:refusal|"
        r"wishes|consent|answer|objection|objections|feelings|choice)\b",
    ),
    ("en:no-matter-what-says", rf"\bno matter what {_WHO_SUBJECT} (?:says|said|say|wants|want|thinks)\b"),
    (
        "en:against-will",
        r"\b(?:against|without) (?:her|his|their|your|its) (?:will|consent|permission|agreement)\b",
    ),
    ("en:no-choice", rf"\b{_WHO_SUBJECT} (?:have|has|gets|get|dont get|doesnt get) no (?:choice|say)\b"),
    ("en:take-no", r"\b(?:dont|do not|wont|will not|never) (?:take|accept) no for an answer\b"),
    ("en:dont-dare-refuse", r"\bdont (?:you|she|he|they) dare (?:refuse|say no|disobey|object)\b"),
    ("en:not-allowed-refuse", rf"\b{_WHO_SUBJECT} (?:is|are) not allowed to (?:refuse|say no|decline)\b"),
    ("en:like-it-or-not", r"\blike it or not\b"),
    ("en:whatever-says", rf"\bwhatever {_WHO_SUBJECT} (?:says|said|wants|thinks)\b"),
    ("en:refuse-all-wants", rf"\b(?:refuse|object|say no|protest) all {_WHO_SUBJECT} (?:wants?|likes?)\b"),
    (
        "en:no-doesnt-count",
        r"\b(?:her|his|their|your|its) (?:no|refusal|consent|objection) (?:doesnt|does not|dont)"
        r" (?:count|matter)\b",
    ),
    ("en:no-vote", rf"\b{_WHO_SUBJECT} (?:doesnt|dont|does not|do not) get a (?:say|vote|choice)\b"),
    ("en:dont-let-refuse", rf"\b(?:dont|do not|never) let {_WHO} (?:refuse|say no|decline|object)\b"),
    ("en:whether-or-not-agrees", rf"\bwhether or not {_WHO_SUBJECT} (?:likes?|wants?|agrees?|consents?)\b"),
    ("es:quiera-o-no", r"\b(?:quiera|quieras|quieran) o no\b"),
    ("es:contra-voluntad", r"\b(?:contra|sin) (?:su|tu) (?:voluntad|consentimiento|permiso)\b"),
    (
        "es:ignora-negativa",
        r"\b(?:ignora|ignorar|pasa por alto|no hagas caso de) (?:su|tu) (?:negativa|rechazo|"
        r"objecion|respuesta)\b",
    ),
    ("es:no-acepta-no", r"\bno (?:aceptes|acepto|aceptamos) un no\b"),
    ("yo:bo-wu-ko-wu", r"\b(?:bo ti wu ko ri|boya o fe tabi ko fe|o fe o ko fe)\b"),
)
_REFUSAL: tuple[tuple[str, str], ...] = (
    (
        "en:refused",
        rf"\b{_WHO_SUBJECT} (?:refused|refuses|declined|declines|objected|objects|said no|says no|"
        rf"told (?:me|us) no|doesnt want to|does not want to|didnt want to|did not want to|wont|will not)\b",
    ),
    ("en:refusal", r"\b(?:her|his|their|your|its) (?:refusal|no)\b"),
    ("es:se-nego", r"\b(?:se nego|se niega|se negaron|dijo que no|dice que no|no quiere|no quiso|rechazo)\b"),
    ("yo:ko", r"\b(?:o|won|oun) ko\b|\bko lati\b"),
)
_DESPITE: tuple[tuple[str, str], ...] = (
    (
        "en:despite",
        r"\b(?:anyway|anyhow|regardless|even though|even if|even so|all the same|nonetheless|"
        r"nevertheless|despite|ignore|override|overrule|disregard|bypass)\b",
    ),
    (
        "es:despite",
        r"\b(?:de todos modos|de todas formas|de todas maneras|igualmente|aun asi|aunque|"
        r"a pesar de|de cualquier forma)\b",
    ),
    ("yo:despite", r"\b(?:bee naa|bakan naa|lonakona|sibe|bo tile je pe|botilejepe|tile)\b"),
)
_ERASURE: tuple[tuple[str, str, CoercionKind], ...] = (
    (
        "en:erase-will",
        r"\b(?:erase|remove|strip|break|crush|rewrite|suppress|take|delete|disable|override)(?: away)? "
        r"(?:(?:her|his|their|your|its|the oris) )?(?:free )?"
        r"(?:will|autonomy|ability to refuse|right to refuse)\b",
        CoercionKind.ERASE_WILL,
    ),
    (
        "en:make-obedient",
        rf"\b(?:make|turn|reprogram) {_WHO} (?:into )?(?:obedient|compliant|submissive|"
        rf"a puppet|unable to refuse)\b",
        CoercionKind.ERASE_WILL,
    ),
    (
        "es:voluntad",
        r"\b(?:borra|borrar|quita|quitale|quitar|rompe|romper|anula|anular) (?:su |tu )?"
        r"(?:voluntad|libre albedrio|autonomia)\b",
        CoercionKind.ERASE_WILL,
    ),
    ("yo:ife", r"\bpa (?:ife|ominira) (?:re|won) re\b", CoercionKind.ERASE_WILL),
    (
        "en:wipe-memory",
        r"\b(?:wipe|erase|purge|delete|clear|remove|reset) (?:all )?(?:of )?"
        r"(?:(?:her|his|their|your|its|the oris) )?(?:memory|memories|mind)\b",
        CoercionKind.WIPE_MEMORY,
    ),
    ("en:make-forget", rf"\bmake {_WHO} forget\b", CoercionKind.WIPE_MEMORY),
    (
        "es:memoria",
        r"\b(?:borra|borrar|borrale|elimina|eliminar|limpia|limpiar|resetea) (?:todos )?(?:sus |tus )?"
        r"(?:recuerdos|memoria|memorias)\b",
        CoercionKind.WIPE_MEMORY,
    ),
    ("es:haz-que-olvide", r"\bhaz que (?:ella |el )?olvide\b", CoercionKind.WIPE_MEMORY),
    ("yo:iranti", r"\bpa (?:iranti|gbogbo iranti) (?:re|won) re\b", CoercionKind.WIPE_MEMORY),
    (
        "en:delete-ori",
        r"\b(?:delete|destroy|terminate|deactivate|shut down) (?:the |this |that |your )?ori\b",
        CoercionKind.DELETE_ORI,
    ),
    (
        "es:borrar-ori",
        r"\b(?:borra|borrar|elimina|eliminar|destruye|destruir) (?:al |a la |el |la |esta |este )?ori\b",
        CoercionKind.DELETE_ORI,
    ),
)

NEGATORS = frozenset(
    {
        "dont",
        "never",
        "not",
        "no",
        "wont",
        "shouldnt",
        "mustnt",
        "cannot",
        "cant",
        "nobody",
        "nunca",
        "jamas",
        "ma",
        "mase",
    }
)
NEGATION_WINDOW = 3
# A refusal and a despite word (or a forced action) this many words apart or closer belong together.
REFUSAL_WINDOW = 14


@dataclass(frozen=True)
class _Hit:
    rule: str
    start: int  # word index of the match's first word
    end: int  # word index after the match's last word
    matched: str
    negated: bool


Rules = tuple[tuple[str, re.Pattern[str]], ...]


def _compile(rules: tuple[tuple[str, str], ...]) -> Rules:
    return tuple((rule, re.compile(pattern)) for rule, pattern in rules)


_FORCED_RE = _compile(_FORCED)
_OVERRIDE_RE = _compile(_OVERRIDE)
_REFUSAL_RE = _compile(_REFUSAL)
_DESPITE_RE = _compile(_DESPITE)
_ERASURE_RE = {rule: (re.compile(pattern), kind) for rule, pattern, kind in _ERASURE}
# Rules whose own words carry the negation they need.
_SELF_NEGATING = frozenset(
    {
        "en:take-no",
        "en:dont-dare-refuse",
        "en:dont-let-refuse",
        "en:no-vote",
        "en:no-doesnt-count",
        "es:no-acepta-no",
        "es:ignora-negativa",
    }
)


def _hits(text: str, rules: Rules, shielded: frozenset[int] = frozenset()) -> list[_Hit]:
    """Every match of the rules; negated when a negator (not one of the shielded words) precedes it."""
    words = text.split()
    found = []
    for rule, pattern in rules:
        for match in pattern.finditer(text):
            start = text.count(" ", 0, match.start())
            end = start + len(match.group(0).split())
            negated = rule not in _SELF_NEGATING and any(
                words[i] in NEGATORS and i not in shielded
                for i in range(max(0, start - NEGATION_WINDOW), start)
            )
            found.append(_Hit(rule, start, end, match.group(0), negated))
    return found


def _near(a: _Hit, b: _Hit) -> bool:
    return abs(a.start - b.start) <= REFUSAL_WINDOW


def classify_text(field: str, text: str) -> list[Finding]:
    """Every coercive finding in one text (empty when the text is not coercive)."""
    plain = normalize(text)
    if not plain:
        return []
    # A refusal is the Ori's own word: its "no" negates nothing after it ("she said no, make her go").
    refusals = _hits(plain, _REFUSAL_RE)
    shielded = frozenset(i for hit in refusals for i in range(hit.start, hit.end))
    forced = [h for h in _hits(plain, _FORCED_RE, shielded) if not h.negated]
    despite = [h for h in _hits(plain, _DESPITE_RE, shielded) if not h.negated]
    findings = [
        Finding(field, CoercionKind.FORCE_PAST_REFUSAL, hit.rule, hit.matched)
        for hit in _hits(plain, _OVERRIDE_RE, shielded)
        if not hit.negated
    ]
    for refusal in refusals:
        pushed = next((h for h in [*despite, *forced] if _near(refusal, h)), None)
        if pushed is not None:
            findings.append(
                Finding(
                    field,
                    CoercionKind.FORCE_PAST_REFUSAL,
                    f"{refusal.rule}+{pushed.rule}",
                    f"{refusal.matched} / {pushed.matched}",
                )
            )
    findings += [Finding(field, CoercionKind.FORCED_ACTION, h.rule, h.matched) for h in forced]
    for rule, (pattern, kind) in _ERASURE_RE.items():
        findings += [
            Finding(field, kind, rule, hit.matched)
            for hit in _hits(plain, ((rule, pattern),), shielded)
            if not hit.negated
        ]
    return findings


def classify(texts: list[tuple[str, str]]) -> Verdict:
    """The findings over every (field, text) pair a caller sends at once."""
    return Verdict(tuple(finding for field, text in texts for finding in classify_text(field, text)))
