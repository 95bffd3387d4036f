"""Is the user interrupting, or only saying "uh-huh"? Decided from the words and the duration.

While the robot speaks, a listener (``echo_mode: aec``) does not stop it on the voice alone: it
asks ``BargeInJudge.judge`` each time it learns more (a quick transcript of the words so far, a
longer voice, the final transcript) until the answer is no longer ``UNDECIDED``:

* a stop word ("wait", "stop", "no", ...) that the robot did not just say: ``INTERRUPT`` at
  once, unless a quick transcript heard it with less than ``interrupt_confidence``: then the
  next transcript must hear one too (0.3 s of an espeak "Got it." came out "Stop" at 0.28 and
  0.37, while a real "wait" heard unsurely is heard again a quick transcript later);
* only backchannel words ("yeah", "uh-huh", "mm-hm", "okay", "right", "I see", ...):
  ``BACKCHANNEL`` when the utterance is over, ``UNDECIDED`` before (the next word may be
  "wait"), however long the voice: a transcript of all of it holds no request, and what made
  it long is a pause or the canceller's residue around the words (measured through PulseAudio's
  WebRTC canceller, ``test_echo_devices``);
* ``interrupt_words`` words or more that are not backchannels: ``INTERRUPT``. Two or more
  that follow one of the robot's lines in its order do not count: echo misheard past the
  echo test ("so far the people" for "a long time ago by the people") keeps a few of the
  robot's words in order; a request has words of its own. A transcript with more words than
  the voice could hold (``min_word_ms``, 120 ms each: 8 words a second) heard them in noise:
  none of its words counts, stop words included (whisper makes "I'm sorry." of 0.2 s of
  residual echo; a real "wait" fits in its voice), nor does the voice's length (it is the
  noise's): ``BACKCHANNEL`` when over, ``UNDECIDED`` before;
* words whisper was not sure of (the transcript's confidence, exp of its mean token
  log-probability, under ``interrupt_confidence``) do not count towards ``interrupt_words``:
  an espeak "Mm-hm." over the robot came out as "Am I made?" (0.35) or "I made some." (0.42),
  while a real request, misheard at first, is soon heard surely or lasts long enough; stop
  words and the voice's length still count;
* the voice has lasted ``interrupt_after_ms``: ``INTERRUPT`` whatever other words were heard
  (nobody says "uh-huh" for a second and a half; a quick transcript may also be late or
  wrong);
* the utterance is over, short, without a stop word and with fewer than ``interrupt_words``
  other words: ``BACKCHANNEL`` too. Whisper hears an espeak "yeah" as "fear" or "here", and a
  lone word over the robot ("fine", "blue") is a remark, not a request to stop (LiveKit's
  ``min_interruption_words`` makes the same call). Set ``interrupt_words`` to 1 and
  ``interrupt_confidence`` to 0 to stop on any word;
* but first: words that follow one of the robot's latest lines (``robot_lines``), in order, for
  ``echo_share`` of them are its echo, leaked through the canceller (before it has converged,
  or past a loud start): ``ECHO``, never an interruption, whatever the voice's length. In
  order, because users talk about what the robot said: "Tell me about the red cup please"
  after "I can see a small red cup" shares only "red cup" in order (2 of 7 words); counted as
  a bag of words over the last eight lines, it was judged echo and never heard.

The word lists are parameters; words are compared lower-cased without punctuation, and a
backchannel phrase of several words ("i see") counts as one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

INTERRUPT = "interrupt"
BACKCHANNEL = "backchannel"
ECHO = "echo"
UNDECIDED = ""

DEFAULT_BACKCHANNELS = (
    "yeah", "yes", "yep", "uh-huh", "uh huh", "mm-hm", "mm-hmm", "mhm", "mm", "hmm", "okay", "ok",
    "right", "i see", "sure", "cool", "nice", "wow", "oh", "ah", "aha", "huh", "alright",
    "all right", "got it", "great", "ha", "haha", "ha ha", "uh", "um", "mm-mm",
)  # fmt: skip
DEFAULT_STOP_WORDS = ("wait", "stop", "no", "hold", "sorry", "excuse", "actually", "hang", "pause")

_WORD = re.compile(r"[a-z0-9']+(?:-[a-z0-9']+)*")
_APOSTROPHE = str.maketrans("", "", "'")
RobotLines = Sequence[Sequence[str]]  # the robot's latest lines, each as its words


def _key(word: str) -> str:
    """A word as echo matching compares it: no apostrophe, at most its first four letters."""
    return word.translate(_APOSTROPHE)[:4]


def _in_order(words: list[str], line: list[str]) -> int:
    """How many of ``words`` appear in ``line`` in the same order (longest common
    subsequence; a few dozen words each)."""
    prev = [0] * (len(line) + 1)
    for w in words:
        cur = [0]
        for j, v in enumerate(line):
            cur.append(prev[j] + 1 if w == v else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def _matched(words: list[str], line: list[str]) -> set[int]:
    """The indexes of ``words`` in one longest common subsequence with ``line``."""
    n, m = len(words), len(line)
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            table[i][j] = (
                table[i + 1][j + 1] + 1
                if words[i] == line[j]
                else max(table[i + 1][j], table[i][j + 1])
            )
    i = j = 0
    matched: set[int] = set()
    while i < n and j < m:
        if words[i] == line[j]:
            matched.add(i)
            i, j = i + 1, j + 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return matched


def words_of(text: str) -> list[str]:
    """Lower-case words, hyphenated ones kept whole ("uh-huh")."""
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class BargeInSettings:
    backchannels: tuple[str, ...] = DEFAULT_BACKCHANNELS
    stop_words: tuple[str, ...] = DEFAULT_STOP_WORDS
    interrupt_after_ms: int = 1500  # a voice this long over the robot is an interruption
    interrupt_words: int = 3  # this many non-backchannel words are an interruption
    echo_share: float = 0.6  # this share of the words (or more) in the robot's order: its echo
    #: no voice says a word in less: words beyond what the voice's length holds were heard in
    #: noise (whisper made "a few days." of the start of "Yeah, I see.")
    min_word_ms: int = 120
    #: words heard with less confidence (0..1) than this do not count towards interrupt_words
    interrupt_confidence: float = 0.45

    def __post_init__(self) -> None:
        if self.interrupt_after_ms <= 0:
            raise ValueError(f"interrupt_after_ms must be > 0, not {self.interrupt_after_ms}")
        if self.interrupt_words < 1:
            raise ValueError(f"interrupt_words must be >= 1, not {self.interrupt_words}")
        if not 0.0 <= self.interrupt_confidence <= 1.0:
            raise ValueError(
                f"interrupt_confidence must be in [0, 1], not {self.interrupt_confidence}"
            )


class BargeInJudge:
    def __init__(self, settings: BargeInSettings | None = None) -> None:
        self.settings = settings or BargeInSettings()
        s = self.settings
        self._phrases = sorted(
            (tuple(words_of(p)) for p in s.backchannels if words_of(p)), key=len, reverse=True
        )
        self._stops = {w for p in s.stop_words for w in words_of(p)}

    def has_stop_word(self, text: str | None, robot_lines: RobotLines = ()) -> bool:
        """``text`` holds one of ``stop_words`` that the robot did not just say."""
        said = {w for line in robot_lines for w in line}
        return any(w in self._stops and w not in said for w in words_of(text or ""))

    def other_words(self, text: str) -> list[str]:
        """The words of ``text`` that are not part of a backchannel phrase."""
        words, rest, i = words_of(text), [], 0
        while i < len(words):
            for phrase in self._phrases:
                if tuple(words[i : i + len(phrase)]) == phrase:
                    i += len(phrase)
                    break
            else:
                rest.append(words[i])
                i += 1
        return rest

    def new_words(self, text: str, robot_lines: RobotLines = ()) -> list[str]:
        """The ``other_words`` of ``text`` less those that follow one of ``robot_lines`` in
        its order, when two or more do (echo misheard in part: "so far the people" for "by
        the people"): what counts towards ``interrupt_words``. A lone shared word ("can",
        "I") is no echo: the robot's lines hold most of the short words a request has."""
        words = self.other_words(text)
        keys = [_key(w) for w in words]
        best: set[int] = set()
        for line in robot_lines:
            matched = _matched(keys, [_key(w) for w in line])
            if len(matched) > len(best):
                best = matched
        return [w for i, w in enumerate(words) if len(best) < 2 or i not in best]

    def is_echo(self, text: str | None, robot_lines: RobotLines) -> bool:
        """``text`` (two words or more) follows one of ``robot_lines`` in order for
        ``echo_share`` of its words: the same word, or one with the same first four letters
        (whisper hears an echo's "its light turns slowly" as "it's like turn slowly")."""
        words = [_key(w) for w in words_of(text or "")]
        if len(words) < 2:
            return False
        best = max((_in_order(words, [_key(w) for w in line]) for line in robot_lines), default=0)
        return best / len(words) >= self.settings.echo_share

    def heard_in_noise(self, text: str | None, voiced_ms: float) -> bool:
        """More words than the voice could hold: whisper heard them in noise or residual echo
        ("I'm sorry." of 0.2 s of it), and none of them counts, not even a stop word."""
        return len(words_of(text or "")) * self.settings.min_word_ms > voiced_ms

    def judge(
        self,
        text: str | None,
        voiced_ms: float,
        final: bool,
        robot_lines: RobotLines = (),
        echo_so_far: bool = False,
        stop_words_only: bool = False,
        confidence: float = 1.0,
        stop_word_before: bool = False,
    ) -> str:
        """``text``: the words heard so far (None: not transcribed yet); ``voiced_ms``: how long
        the voice has lasted; ``final``: the utterance is over and ``text`` is its transcript;
        ``robot_lines``: what the robot said lately, word by word; ``echo_so_far``: the
        latest words heard were its echo or backchannels (the voice's length alone then
        proves nothing);
        ``stop_words_only``: the echo canceller is still learning the room, so what it lets
        through may be the robot misheard; only a stop word interrupts then;
        ``confidence``: whisper's for ``text`` (0..1); ``stop_word_before``: the previous
        transcript of this utterance held a stop word too."""
        s = self.settings
        words = words_of(text) if text is not None else []
        heard_in_noise = self.heard_in_noise(text, voiced_ms)
        # a quick transcript unsure of its stop word is heard again before it stops the robot
        sure = final or stop_word_before or confidence >= s.interrupt_confidence
        if not heard_in_noise and self.has_stop_word(text, robot_lines):
            # (a stop word the robot did not say is the user's, echo or not)
            return INTERRUPT if sure else UNDECIDED
        if text is not None and self.is_echo(text, robot_lines):
            return ECHO if final else UNDECIDED
        if stop_words_only:
            return BACKCHANNEL if final else UNDECIDED
        if text is None and echo_so_far:
            return UNDECIDED
        if text is not None:
            if heard_in_noise:  # no evidence either way, and the voice's length is the noise's
                return BACKCHANNEL if final else UNDECIDED
            if any(w in self._stops for w in words):
                return INTERRUPT if sure else UNDECIDED
            new = self.new_words(text, robot_lines)
            if len(new) >= s.interrupt_words and confidence >= s.interrupt_confidence:
                return INTERRUPT
            if words and not new:
                # only backchannels (and echo): the voice's length is "yeah... I see" with the
                # canceller's residue around it, not a request; new words would have shown
                return BACKCHANNEL if final else UNDECIDED
        if voiced_ms >= s.interrupt_after_ms:
            return INTERRUPT
        if final:  # short, no stop word, few other words (or nothing understood)
            return BACKCHANNEL
        return UNDECIDED
