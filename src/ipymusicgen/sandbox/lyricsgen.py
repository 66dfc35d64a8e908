"""Template lyrics for the local music-service simulator.

The real service writes lyrics with a language model; the sandbox only needs
text that is shaped like a song (section tags, rhyming couplets, a repeated
chorus) and is recognisably about the prompt, and that is identical for the
same prompt so tests and demos are reproducible.
"""

from __future__ import annotations

import hashlib
import random
import re

TITLE_LIMIT = 80
MAX_KEYWORDS = 6
MAX_WORD_LENGTH = 30

STOPWORDS = frozenset(
    {
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "about",
        "from",
        "into",
        "over",
        "under",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "it",
        "its",
        "it's",
        "this",
        "that",
        "these",
        "those",
        "my",
        "your",
        "our",
        "their",
        "his",
        "her",
        "me",
        "you",
        "we",
        "they",
        "i",
        "he",
        "she",
        "them",
        "us",
        "song",
        "songs",
        "track",
        "music",
        "make",
        "write",
        "create",
        "some",
        "very",
        "really",
        "just",
        "like",
        "want",
        "need",
        "please",
        "style",
        "genre",
        "feat",
        "featuring",
        "vibe",
        "vibes",
        "mood",
        "kind",
        "sort",
        "type",
        "than",
        "then",
        "there",
        "here",
        "what",
        "when",
        "where",
        "who",
        "why",
        "how",
        "all",
        "any",
        "more",
        "most",
        "much",
        "many",
        "not",
        "no",
        "yes",
        "so",
        "too",
        "also",
        "can",
        "will",
        "would",
        "could",
        "should",
    }
)
FALLBACK_WORDS = ("midnight", "heartbeat", "highway")
RHYMES = (
    ("night", "light", "flight", "sight"),
    ("fire", "wire", "choir", "spire"),
    ("rain", "pain", "train", "lane"),
    ("day", "way", "bay", "fray"),
    ("stars", "cars", "bars", "scars"),
    ("sun", "one", "run"),
    ("sea", "tree", "key", "melody"),
    ("heart", "start", "art", "chart"),
)
VERSE_LINES = (
    "walking with the {kw} into the {end}",
    "I still hear the {kw} calling through the {end}",
    "every little {kw} is burning like the {end}",
    "we wrote our names in {kw} across the {end}",
    "hold on to the {kw}, don't lose the {end}",
    "counting every {kw} underneath the {end}",
    "your {kw} was the only thing that lit the {end}",
    "dancing on the {kw} until we found the {end}",
    "there's a {kw} in my pocket shaped just like the {end}",
    "driving past the {kw}, chasing down the {end}",
)
CHORUS_LINES = (
    "oh, {hook}, take me to the {end}",
    "{hook}, shining like the {end}",
    "sing it for the {kw}, sing it for the {end}",
    "we don't need a reason when we've got the {end}",
    "{hook}, never let it fade into the {end}",
)
BRIDGE_LINES = (
    "and if the {kw} falls down into the {end}",
    "I'll be right here, waiting for the {end}",
    "turn it up, let the {kw} light up the {end}",
    "nothing's gonna break the {kw} or the {end}",
)
OUTRO_LINES = (
    "{hook}, into the {end}",
    "just me, the {kw}, and the {end}",
)
TITLE_PATTERNS = ("{a} {b}", "{a} Tonight", "Chasing {a}", "{a} and the {End}", "Songs of {a}", "{a}")


def seeded_rng(prompt: str) -> random.Random:
    """Stable RNG per prompt (sha256, since hash() is salted per process)."""
    digest = hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def keywords(prompt: str) -> list[str]:
    """Content words of the prompt, first-seen order, original casing kept."""
    found: list[str] = []
    seen: set[str] = set()
    for word in re.findall(r"[^\W\d_]+(?:['-][^\W\d_]+)*", prompt):
        lower = word.lower()
        if len(word) < 3 or lower in STOPWORDS or lower in seen:
            continue
        seen.add(lower)
        found.append(word[:MAX_WORD_LENGTH])
        if len(found) == MAX_KEYWORDS:
            break
    return found or list(FALLBACK_WORDS)


def capitalise(text: str) -> str:
    """Upper-case only the first character (str.capitalize would lower the rest)."""
    return text[:1].upper() + text[1:]


def make_title(words: list[str], rng: random.Random) -> str:
    """Short title from the top keywords, capped at TITLE_LIMIT characters."""
    pattern = rng.choice(TITLE_PATTERNS if len(words) > 1 else TITLE_PATTERNS[1:])
    title = pattern.format(
        a=capitalise(words[0]),
        b=capitalise(words[1]) if len(words) > 1 else "",
        End=capitalise(rng.choice(rng.choice(RHYMES))),
    )
    title = " ".join(title.split())
    if len(title) > TITLE_LIMIT:
        title = title[: TITLE_LIMIT - 1].rstrip() + "\u2026"
    return title


class LineMaker:
    """Fills templates, cycling keywords so every prompt word gets sung."""

    def __init__(self, words: list[str], hook: str, rng: random.Random) -> None:
        self.words = words
        self.hook = hook
        self.rng = rng
        self.next_word = 0

    def keyword(self) -> str:
        """Next prompt word in rotation."""
        word = self.words[self.next_word % len(self.words)]
        self.next_word += 1
        return word

    def line(self, template: str, end: str) -> str:
        """One lyric line; only consumes a keyword if the template uses one."""
        kw = self.keyword() if "{kw}" in template else ""
        return capitalise(template.format(kw=kw, end=end, hook=self.hook))

    def couplets(self, templates: tuple[str, ...], count: int) -> list[str]:
        """Lines in rhyming pairs: each pair shares a rhyme group."""
        picked = self.rng.sample(templates, k=min(count, len(templates)))
        while len(picked) < count:
            picked.append(self.rng.choice(templates))
        lines: list[str] = []
        for start in range(0, count, 2):
            ends = self.rng.sample(self.rng.choice(RHYMES), k=2)
            for offset, template in enumerate(picked[start : start + 2]):
                lines.append(self.line(template, ends[offset]))
        return lines


def generate_lyrics(prompt: str) -> tuple[str, str]:
    """Return (lyrics, title) for a prompt, identical on every call."""
    rng = seeded_rng(prompt)
    words = keywords(prompt)
    title = make_title(words, rng)
    maker = LineMaker(words, title if len(title) <= 40 else words[0], rng)
    chorus = maker.couplets(CHORUS_LINES, 4)
    sections = [
        ("[Verse 1]", maker.couplets(VERSE_LINES, 4)),
        ("[Chorus]", chorus),
        ("[Verse 2]", maker.couplets(VERSE_LINES, 4)),
        ("[Chorus]", chorus),
        ("[Bridge]", maker.couplets(BRIDGE_LINES, 4)),
        ("[Chorus]", chorus),
        ("[Outro]", maker.couplets(OUTRO_LINES, 2)),
    ]
    text = "\n\n".join(tag + "\n" + "\n".join(lines) for tag, lines in sections)
    return text, title
