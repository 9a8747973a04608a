"""A small synthetic keyword set laid out like Google Speech Commands v2 (generated, never downloaded).

Each keyword is a fixed sequence of 2-4 speech-like units (vowels with two formants over a harmonic source, formant
glides, band-limited fricative noise, plosive bursts, nasal hums), drawn once from a fixed seed, so classes differ
in their units and in their order. Every clip varies like a recording: a speaker-specific pitch and vocal-tract
scale (one per speaker, as in GSC, where a speaker id prefixes every file name), per-clip tempo and unit-length
jitter, onset offset, gain and additive white noise. The result is learnable but not trivial.

Layout (the same as Speech Commands v2, so ``recipes_speech/Google-speech-commands/prepare_GSC.py`` reads it)::

    OUT/<word>/<speaker>_nohash_<k>.wav      mono 16-bit PCM
    OUT/validation_list.txt                  lines "<word>/<file>.wav" (whole speakers)
    OUT/testing_list.txt

CLI: ``python -m ssm_plugins.data.keywords --out DIR [--words sc10|sc35] [--sample-rate 16000] [--duration 1.0]``.
Tests use a lower rate and shorter clips (``--sample-rate 4000 --duration 0.5``); the recipe default is 16 kHz, 1 s.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import wave
from typing import Dict, List, Sequence, Tuple

import numpy as np

__all__ = ["SC10_WORDS", "SC35_WORDS", "keyword_units", "synthesize_keyword", "write_keyword_set"]

# The 10 keywords of SC10 (the subset used by CKConv/S4/eSSM) and all 35 words of Speech Commands v2.
SC10_WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
SC35_WORDS = SC10_WORDS + (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    "bed", "bird", "cat", "dog", "happy", "house", "marvin", "sheila", "tree", "wow",
    "backward", "forward", "follow", "learn", "visual")
WORD_SETS = {"sc10": SC10_WORDS, "sc35": SC35_WORDS}

# Unit inventory. Frequencies stay below 1.9 kHz so that a 4 kHz version (for fast tests) keeps every unit.
# Durations are fractions of a 1 s clip (scaled with --duration).
_VOWELS = {"a": (700., 1200.), "e": (450., 1500.), "i": (300., 1750.), "o": (450., 800.), "u": (300., 650.)}
_UNITS: Dict[str, Tuple] = {
    **{f"V{k}": ("vowel", f, f, 0.14) for k, f in _VOWELS.items()},
    "Gai": ("vowel", _VOWELS["a"], _VOWELS["i"], 0.16),
    "Gou": ("vowel", _VOWELS["o"], _VOWELS["u"], 0.16),
    "Gua": ("vowel", _VOWELS["u"], _VOWELS["a"], 0.16),
    "Gie": ("vowel", _VOWELS["i"], _VOWELS["e"], 0.16),
    "Fs": ("fricative", 1650., 200., 0.11),
    "Ff": ("fricative", 1000., 500., 0.10),
    "Fh": ("fricative", 1300., 300., 0.10),
    "P": ("burst", 1200., 700., 0.05),
    "N": ("nasal", 250., 0., 0.09),
}
_UNIT_NAMES = tuple(_UNITS)
_WORD_SEED = 20240215


def keyword_units(words: Sequence[str] = SC35_WORDS) -> Dict[str, Tuple[str, ...]]:
    """The unit sequence of every word: distinct per word, fixed by a seed (the same for SC10 and SC35)."""
    rng = np.random.default_rng(_WORD_SEED)
    table, seen = {}, set()
    for word in SC35_WORDS:
        while True:
            units = tuple(rng.choice(_UNIT_NAMES, size=int(rng.integers(2, 5))))
            # a word needs a voiced nucleus, and no two words share a sequence
            if units not in seen and any(u[0] in "VGN" for u in units):
                break
        seen.add(units)
        table[word] = units
    unknown = [w for w in words if w not in table]
    if unknown:
        raise ValueError(f"words must be Speech Commands v2 words, got unknown {unknown}")
    return {w: table[w] for w in words}


def _harmonic(n: int, sr: int, f0: np.ndarray, f1: np.ndarray, f2: np.ndarray) -> np.ndarray:
    """Harmonics of a (slowly varying) pitch f0, weighted by two formant resonances centred at f1 and f2."""
    phase = 2 * np.pi * np.cumsum(f0) / sr
    out = np.zeros(n)
    for k in range(1, int(0.95 * sr / 2 / f0.min()) + 1):
        fk = k * f0
        gain = np.exp(-0.5 * ((fk - f1) / 90.) ** 2) + 0.7 * np.exp(-0.5 * ((fk - f2) / 120.) ** 2)
        gain = gain * (fk < 0.95 * sr / 2)
        out += gain * np.sin(k * phase)
    return out


def _band_noise(n: int, sr: int, centre: float, width: float, rng: np.random.Generator) -> np.ndarray:
    spec = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, 1. / sr)
    spec *= np.exp(-0.5 * ((freqs - centre) / max(width, 1.)) ** 2)
    out = np.fft.irfft(spec, n)
    return out / (np.abs(out).max() + 1e-9)


def synthesize_keyword(word_units: Sequence[str], sample_rate: int, duration: float, pitch: float,
                       tract: float, rng: np.random.Generator) -> np.ndarray:
    """One clip (float64, peak <= 1) of ``duration`` s: the word's units with per-clip jitter, onset, gain, noise.

    pitch: the speaker's mean f0 (Hz); tract: the speaker's formant scale (about 0.9-1.1).
    """
    n_total = int(round(sample_rate * duration))
    tempo = rng.uniform(0.85, 1.2)
    pieces = []
    for name in word_units:
        kind, a, b, length = _UNITS[name]
        n = max(8, int(length * duration * sample_rate * tempo * rng.uniform(0.85, 1.15)))
        t = np.linspace(0., 1., n)
        env = np.sin(np.pi * np.clip(t, 0, 1)) ** 0.5
        if kind == "vowel":
            f0 = pitch * (1 + 0.08 * (t - 0.5) * rng.choice([-1, 1]))
            f1 = tract * (a[0] + (b[0] - a[0]) * t)
            f2 = tract * (a[1] + (b[1] - a[1]) * t)
            seg = _harmonic(n, sample_rate, f0, f1, f2)
        elif kind == "nasal":
            seg = 0.6 * _harmonic(n, sample_rate, np.full(n, pitch), np.full(n, a * tract), np.full(n, a * tract))
        elif kind == "fricative":
            seg = 0.5 * _band_noise(n, sample_rate, a * tract, b, rng)
        else:  # burst: a closure (silence) then a short noise release
            seg = _band_noise(n, sample_rate, a * tract, b, rng) * (t > 0.4) * np.exp(-8 * np.clip(t - 0.4, 0, 1))
            env = np.ones(n)
        seg = seg * env
        pieces.append(seg / (np.abs(seg).max() + 1e-9))
        pieces.append(np.zeros(int(rng.uniform(0.0, 0.02) * duration * sample_rate)))  # inter-unit gap
    speech = np.concatenate(pieces)[:n_total]
    clip = np.zeros(n_total)
    onset = int(rng.uniform(0.0, max(0.0, n_total - len(speech))))
    clip[onset:onset + len(speech)] = speech * rng.uniform(0.3, 0.9)
    snr_db = rng.uniform(12., 30.)
    power = np.mean(speech ** 2) * 0.36 + 1e-9
    clip += rng.standard_normal(n_total) * np.sqrt(power / 10 ** (snr_db / 10))
    return clip / max(1.0, np.abs(clip).max())


def _write_wav(path: str, audio: np.ndarray, sample_rate: int) -> None:
    pcm = np.clip(np.round(audio * 32767), -32768, 32767).astype("<i2")
    with wave.open(path, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(sample_rate)
        f.writeframes(pcm.tobytes())


def write_keyword_set(out: str, words: Sequence[str] = SC10_WORDS, speakers: int = 15, repeats: int = 2,
                      valid_speakers: int = 2, test_speakers: int = 2, sample_rate: int = 16000,
                      duration: float = 1.0, seed: int = 0) -> Dict[str, int]:
    """Write the set into ``out`` (Speech Commands layout); returns the number of clips per split.

    Every speaker says every word ``repeats`` times; validation and test take whole speakers (as GSC's lists do).
    Deterministic for fixed arguments.
    """
    for name, value in (("speakers", speakers), ("repeats", repeats), ("sample_rate", sample_rate)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if valid_speakers < 1 or test_speakers < 1 or valid_speakers + test_speakers >= speakers:
        raise ValueError(f"need valid_speakers, test_speakers >= 1 and their sum < speakers={speakers}, got "
                         f"{valid_speakers} and {test_speakers}")
    if not 0.05 <= duration <= 10.0:
        raise ValueError(f"duration must be in [0.05, 10] s, got {duration}")
    if sample_rate < 4000:
        raise ValueError(f"sample_rate must be >= 4000 Hz (units reach 1.9 kHz), got {sample_rate}")
    units = keyword_units(words)
    rng = np.random.default_rng(seed)
    speaker_ids = [hashlib.sha1(f"speaker{seed}-{i}".encode()).hexdigest()[:8] for i in range(speakers)]
    voices = [(rng.uniform(90., 220.), rng.uniform(0.9, 1.1)) for _ in speaker_ids]
    split_of = {s: "valid" if i < valid_speakers else "test" if i < valid_speakers + test_speakers else "train"
                for i, s in enumerate(speaker_ids)}
    lists: Dict[str, List[str]] = {"valid": [], "test": []}
    counts = {"train": 0, "valid": 0, "test": 0}
    os.makedirs(out, exist_ok=True)
    for word in words:
        os.makedirs(os.path.join(out, word), exist_ok=True)
        for spk, (pitch, tract) in zip(speaker_ids, voices):
            for k in range(repeats):
                clip = synthesize_keyword(units[word], sample_rate, duration, pitch, tract, rng)
                rel = f"{word}/{spk}_nohash_{k}.wav"
                _write_wav(os.path.join(out, rel), clip, sample_rate)
                counts[split_of[spk]] += 1
                if split_of[spk] in lists:
                    lists[split_of[spk]].append(rel)
    for split, name in (("valid", "validation_list.txt"), ("test", "testing_list.txt")):
        with open(os.path.join(out, name), "w") as f:
            f.write("".join(line + "\n" for line in lists[split]))
    return counts


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output folder (Speech Commands v2 layout)")
    parser.add_argument("--words", choices=sorted(WORD_SETS), default="sc10")
    parser.add_argument("--speakers", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=2, help="clips per speaker and word")
    parser.add_argument("--sample-rate", type=int, default=16000)
    parser.add_argument("--duration", type=float, default=1.0, help="clip length in seconds")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    counts = write_keyword_set(args.out, WORD_SETS[args.words], speakers=args.speakers, repeats=args.repeats,
                               sample_rate=args.sample_rate, duration=args.duration, seed=args.seed)
    print(f"wrote {sum(counts.values())} clips to {args.out}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
