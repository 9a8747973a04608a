"""A small deterministic two-source mixture set at 8 kHz, laid out like wsj0-2mix, from generated signals only.

Each source is a synthetic voice: a harmonic series on a smooth, randomly drifting f0 contour, shaped by
three formant resonances that change from syllable to syllable, cut into syllables by raised-cosine
envelopes with pauses between them, plus a little aspiration noise. The two voices of a mixture differ in
f0 by at least ``min_f0_ratio`` and are mixed at a relative level drawn from [-2.5, 2.5] dB (mix = s1 + s2
exactly). Files go where a wsj0-2mix user has them, so the recipe reads both the same way:

    <out>/wav8k/min/{tr,cv,tt}/{mix,s1,s2}/<name>.wav      and the csv files <out>/wsj_{tr,cv,tt}.csv

    python -m ssm_plugins.data.mixtures --out DIR [--train 64 --valid 16 --test 16 --seed 0]

``prepare_wsjmix_csv`` turns any such folder (the generated one or the real wsj0-2mix) into SpeechBrain's
csv files (columns ID, duration, mix_wav, s1_wav, s2_wav with their _format/_opts companions).
"""
from __future__ import annotations

import argparse
import csv
import json
import os

import numpy as np

SPLITS = ("tr", "cv", "tt")
MIX_LEVEL_DB = 2.5  # relative level of the two sources, uniform in [-2.5, 2.5] dB
_MANIFEST = "mixtures.json"


def _smooth_walk(rng, n, steps, scale):
    """A smooth random curve of n samples: ``steps`` random knots, linearly interpolated."""
    knots = np.cumsum(rng.normal(0.0, scale, steps + 1))
    return np.interp(np.linspace(0, steps, n), np.arange(steps + 1), knots - knots.mean())


def _formant_gain(freqs, formants, bandwidths):
    """|H(f)| of a cascade of second-order resonances (unit gain at DC), evaluated at ``freqs`` (any shape)."""
    gain = np.ones_like(freqs)
    for centre, bw in zip(formants, bandwidths):
        gain = gain * centre ** 2 / np.sqrt((centre ** 2 - freqs ** 2) ** 2 + (bw * freqs) ** 2)
    return gain


def make_speaker(rng: np.random.Generator, speaker_id: str) -> dict:
    """Traits of one synthetic speaker: sex, mean f0 (male 85-150 Hz, female 160-260 Hz), vocal-tract scale of
    the formants (female about 15 % higher), glottal spectral tilt and speaking rate."""
    female = bool(rng.random() < 0.5)
    f0 = float(np.exp(rng.uniform(np.log(160.0), np.log(260.0)) if female
                      else rng.uniform(np.log(85.0), np.log(150.0))))
    return {"id": speaker_id, "female": female, "f0": f0,
            "tract": float((1.15 if female else 1.0) * np.exp(rng.normal(0.0, 0.04))),
            "tilt": float(rng.uniform(0.8, 1.4)), "rate": float(np.exp(rng.normal(0.0, 0.12)))}


def synthetic_voice(rng: np.random.Generator, num_samples: int, f0: float, sample_rate: int = 8000,
                    tract: float = 1.0, tilt: float = 1.0, rate: float = 1.0) -> np.ndarray:
    """One synthetic utterance of ``num_samples`` samples around fundamental ``f0`` Hz, peak-normalised (float64).

    Voiced syllables are a glottal pulse train (harmonics in phase, amplitudes falling as h^-tilt) on a smooth,
    drifting f0 contour, shaped by three formant resonances (scaled by the speaker's ``tract``) that change from
    syllable to syllable, cut by raised-cosine envelopes with pauses between them (``rate`` scales syllable and
    pause lengths), plus a little aspiration noise.
    """
    t = np.arange(num_samples)
    # f0 contour: slow drift (±~8 %) and a declination over the utterance
    contour = f0 * np.exp(_smooth_walk(rng, num_samples, max(2, num_samples // 1600), 0.05)
                          - 0.1 * t / num_samples)
    phase = 2 * np.pi * np.cumsum(contour) / sample_rate
    num_harmonics = int(0.48 * sample_rate / contour.min())
    harmonics = np.arange(1, num_harmonics + 1)[:, None]
    alive = harmonics * contour[None, :] < 0.48 * sample_rate  # no harmonic above ~Nyquist
    signal, envelope = np.zeros(num_samples), np.zeros(num_samples)
    start = int(rng.uniform(0.0, 0.15) * sample_rate)
    while start < num_samples:
        length = int(rng.uniform(0.12, 0.32) * rate * sample_rate)
        stop = min(start + length, num_samples)
        formants = tuple(tract * f for f in (rng.uniform(300, 850), rng.uniform(850, 2200), rng.uniform(2200, 3100)))
        bandwidths = (rng.uniform(60, 120), rng.uniform(80, 160), rng.uniform(120, 250))
        seg = slice(start, stop)
        freqs = harmonics * contour[None, seg]
        amps = _formant_gain(freqs, formants, bandwidths) / harmonics ** tilt * alive[:, seg]
        signal[seg] = (amps * np.cos(harmonics * phase[None, seg])).sum(0)  # in phase: one pulse per period
        window = np.sin(np.pi * np.arange(stop - start) / length) ** 2  # raised cosine, cut at the end if needed
        envelope[seg] = window * rng.uniform(0.5, 1.0)
        start = stop + int(rng.uniform(0.03, 0.15) * rate * sample_rate)
    signal = signal / (np.abs(signal).max() + 1e-9)
    voice = envelope * (signal + 0.02 * rng.standard_normal(num_samples))
    return voice / (np.abs(voice).max() + 1e-9)


def _utterance(rng, speaker, min_seconds, max_seconds, sample_rate):
    """One utterance of ``speaker`` (its f0 within ±10 % of the speaker's mean): (f0, waveform)."""
    num_samples = int(rng.uniform(min_seconds, max_seconds) * sample_rate)
    f0 = speaker["f0"] * float(np.exp(rng.uniform(-0.1, 0.1)))
    return f0, synthetic_voice(rng, num_samples, f0, sample_rate, speaker["tract"], speaker["tilt"], speaker["rate"])


def _mix(s1, s2, level_db):
    """wsj0-2mix "min": both cut to the shorter, s1 at +level/2 and s2 at -level/2 dB around equal power, then
    scaled to a mixture peak of 0.9 (no clipping, mix = s1 + s2 exactly)."""
    length = min(len(s1), len(s2))
    s1, s2 = s1[:length] / np.std(s1[:length]), s2[:length] / np.std(s2[:length]) * 10 ** (-level_db / 20)
    scale = 0.9 / np.abs(s1 + s2).max()
    return s1 * scale, s2 * scale


def _pairs(rng, utterances, count, min_f0_ratio):
    """``count`` pairs of utterances of two different speakers whose f0 differ by at least ``min_f0_ratio``."""
    speakers = np.array([u[0] for u in utterances])
    f0 = np.array([u[1] for u in utterances], dtype=np.float64)
    ratio = np.maximum(f0[:, None], f0[None, :]) / np.minimum(f0[:, None], f0[None, :])
    if not ((speakers[:, None] != speakers[None, :]) & (ratio >= min_f0_ratio)).any():  # else no draw ends
        raise ValueError(f"no two utterances of different speakers have f0 at least {min_f0_ratio}x apart among "
                         f"{len(utterances)} utterances of {len(set(speakers.tolist()))} speakers: raise the "
                         f"number of speakers or lower min_f0_ratio")
    pairs = []
    while len(pairs) < count:
        a, b = rng.choice(len(utterances), 2, replace=False)
        (spk_a, f0_a, _, _), (spk_b, f0_b, _, _) = utterances[a], utterances[b]
        if spk_a != spk_b and max(f0_a, f0_b) / min(f0_a, f0_b) >= min_f0_ratio:
            pairs.append((a, b))
    return pairs


def generate_mixtures(out_dir, n_train: int = 64, n_valid: int = 16, n_test: int = 16, min_seconds: float = 1.0,
                      max_seconds: float = 2.0, sample_rate: int = 8000, seed: int = 0, min_f0_ratio: float = 1.25,
                      n_speakers: int = 24, utterances_per_speaker: int = 10, n_test_speakers: int = 12,
                      overwrite: bool = False) -> dict:
    """Write the mixture set under ``out_dir`` (wsj0-2mix layout, see the module docstring) and its csv files.

    Training speakers (``n_speakers``, ``utterances_per_speaker`` utterances each) also go to
    ``<out_dir>/wsj0/si_tr_s/<spk>/<utt>.wav`` (the dynamic-mixing source folder, ``base_folder_dm``); the
    training mixtures pair those utterances, the validation mixtures other utterances of the same speakers, the
    test mixtures utterances of ``n_test_speakers`` unseen speakers, as in wsj0-2mix. The test speakers come from
    their own random stream: the test set does not depend on the training set's size (n_speakers, n_train).
    Returns ``{"tr": csv path, "cv": ..., "tt": ...}``. Deterministic in its arguments; a folder generated
    with the same arguments is reused unless ``overwrite``.
    """
    counts = {"tr": n_train, "cv": n_valid, "tt": n_test}
    for name, value in (("n_train", n_train), ("n_valid", n_valid), ("n_test", n_test), ("n_speakers", n_speakers),
                        ("utterances_per_speaker", utterances_per_speaker), ("n_test_speakers", n_test_speakers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if min(n_speakers, n_test_speakers) < 2:
        raise ValueError(f"n_speakers and n_test_speakers must be >= 2 (mixtures pair two speakers), got "
                         f"{n_speakers}, {n_test_speakers}")
    if not 0 < min_seconds <= max_seconds:
        raise ValueError(f"need 0 < min_seconds <= max_seconds, got {min_seconds}, {max_seconds}")
    if not 1.0 <= min_f0_ratio <= 1.5:
        raise ValueError(f"min_f0_ratio must be in [1, 1.5] (speakers' f0 span 85-260 Hz), got {min_f0_ratio}")
    import soundfile  # SpeechBrain's own audio backend; imported only when writing

    settings = dict(counts=counts, min_seconds=min_seconds, max_seconds=max_seconds, sample_rate=sample_rate,
                    seed=seed, min_f0_ratio=min_f0_ratio, n_speakers=n_speakers,
                    utterances_per_speaker=utterances_per_speaker, n_test_speakers=n_test_speakers, version=3)
    manifest = os.path.join(out_dir, _MANIFEST)
    csvs = {split: os.path.join(out_dir, f"wsj_{split}.csv") for split in SPLITS}
    if not overwrite and os.path.exists(manifest) and all(os.path.exists(p) for p in csvs.values()):
        with open(manifest, encoding="utf-8") as f:
            if json.load(f) == settings:
                return csvs

    def write(path, wav):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        soundfile.write(path, wav.astype(np.float32), sample_rate, subtype="FLOAT")

    train_rng, test_rng = np.random.default_rng([seed, 99]), np.random.default_rng([seed, 98])
    speakers = {"train": [make_speaker(train_rng, f"s{i:02d}") for i in range(n_speakers)],
                "test": [make_speaker(test_rng, f"e{i:02d}") for i in range(n_test_speakers)]}
    root = os.path.join(out_dir, "wav8k" if sample_rate == 8000 else f"wav{sample_rate // 1000}k", "min")
    for offset, split in enumerate(SPLITS):
        rng = np.random.default_rng([seed, offset])  # each split its own stream: sizes do not shift the others
        pool = speakers["test" if split == "tt" else "train"]
        per_speaker = utterances_per_speaker if split == "tr" else max(2, -(-2 * counts[split] // len(pool)))
        utterances = []  # (speaker id, f0, utterance id, waveform)
        for speaker in pool:
            for k in range(per_speaker):
                f0, wav = _utterance(rng, speaker, min_seconds, max_seconds, sample_rate)
                utt = f"{speaker['id']}{'c' if split == 'tr' else 'o'}{offset}{k:03d}"
                utterances.append((speaker["id"], f0, utt, wav))
                if split == "tr":  # the WSJ0-style source folder of dynamic mixing
                    write(os.path.join(out_dir, "wsj0", "si_tr_s", speaker["id"], f"{utt}.wav"), wav)
        for index, (a, b) in enumerate(_pairs(rng, utterances, counts[split], min_f0_ratio)):
            level_db = float(rng.uniform(-MIX_LEVEL_DB, MIX_LEVEL_DB))
            s1, s2 = _mix(utterances[a][3], utterances[b][3], level_db)
            # wsj0-2mix naming: <utt1>_<level1>_<utt2>_<level2>.wav (a running index keeps names unique)
            name = f"{utterances[a][2]}_{level_db / 2:.4f}_{utterances[b][2]}_{-level_db / 2:.4f}_{index:04d}.wav"
            for kind, wav in (("mix", s1 + s2), ("s1", s1), ("s2", s2)):
                write(os.path.join(root, split, kind, name), wav)
    csvs = prepare_wsjmix_csv(out_dir, out_dir, num_spks=2, sample_rate=sample_rate)
    with open(manifest, "w", encoding="utf-8") as f:
        json.dump(settings, f)
    return csvs


def prepare_wsjmix_csv(data_folder, save_folder, num_spks: int = 2, sample_rate: int = 8000) -> dict:
    """SpeechBrain csv files ``<save_folder>/wsj_{tr,cv,tt}.csv`` for a wsj0-mix folder
    ``<data_folder>/wav{sample_rate//1000}k/min/{tr,cv,tt}/{mix,s1,s2[,s3]}/*.wav`` (files matched by name).

    Columns: ID (file stem), duration (s), and for mix, s1, s2(, s3): <x>_wav, <x>_wav_format, <x>_wav_opts.
    """
    import soundfile

    if num_spks not in (2, 3):
        raise ValueError(f"num_spks must be 2 or 3, got {num_spks!r}")
    root = os.path.join(data_folder, f"wav{sample_rate // 1000}k", "min")
    kinds = ["mix"] + [f"s{i + 1}" for i in range(num_spks)]
    columns = ["ID", "duration"] + [f"{k}_wav{suffix}" for k in kinds for suffix in ("", "_format", "_opts")]
    os.makedirs(save_folder, exist_ok=True)
    csvs = {}
    for split in SPLITS:
        mix_dir = os.path.join(root, split, "mix")
        if not os.path.isdir(mix_dir):
            raise ValueError(f"data_folder must hold wav{sample_rate // 1000}k/min/{split}/mix (the wsj0-mix layout), "
                             f"not found: {mix_dir}")
        names = sorted(n for n in os.listdir(mix_dir) if n.endswith(".wav"))
        if not names:
            raise ValueError(f"no .wav files in {mix_dir}")
        csvs[split] = os.path.join(save_folder, f"wsj_{split}.csv")
        with open(csvs[split], "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            for name in names:
                row = {"ID": os.path.splitext(name)[0]}
                for kind in kinds:
                    path = os.path.abspath(os.path.join(root, split, kind, name))
                    if not os.path.exists(path):
                        raise ValueError(f"{kind} file missing for mixture {name}: {path}")
                    row.update({f"{kind}_wav": path, f"{kind}_wav_format": "wav", f"{kind}_wav_opts": None})
                info = soundfile.info(row["mix_wav"])
                if info.samplerate != sample_rate:
                    raise ValueError(f"{row['mix_wav']} has sample rate {info.samplerate}, expected {sample_rate}")
                row["duration"] = info.frames / info.samplerate
                writer.writerow(row)
    return csvs


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder (wsj0-2mix layout + wsj_{tr,cv,tt}.csv)")
    parser.add_argument("--train", type=int, default=64)
    parser.add_argument("--valid", type=int, default=16)
    parser.add_argument("--test", type=int, default=16)
    parser.add_argument("--min-seconds", type=float, default=1.0)
    parser.add_argument("--max-seconds", type=float, default=2.0)
    parser.add_argument("--speakers", type=int, default=24, help="training speakers")
    parser.add_argument("--utterances-per-speaker", type=int, default=10)
    parser.add_argument("--test-speakers", type=int, default=12, help="unseen speakers of the test mixtures")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    csvs = generate_mixtures(args.out, args.train, args.valid, args.test, args.min_seconds, args.max_seconds,
                             seed=args.seed, n_speakers=args.speakers,
                             utterances_per_speaker=args.utterances_per_speaker,
                             n_test_speakers=args.test_speakers, overwrite=args.overwrite)
    print(json.dumps(csvs))
    return csvs


if __name__ == "__main__":
    main()
