"""CelebA-format multi-label data from scikit-learn's digits (deterministic, never downloaded).

The layout of the official aligned-and-cropped CelebA release, under ``root``::

    img_align_celeba/000001.jpg ...     178 x 218 (width x height) RGB JPEG, numbered from 000001
    list_attr_celeba.txt                line 1: the number of images; line 2: the 40 attribute names;
                                        then "<file> <40 values of 1 or -1>" per image (values padded to 2 chars)
    list_eval_partition.txt             "<file> <0|1|2>" per image: 0 train, 1 val, 2 test

The files keep the official 40 attribute names, in the official order; for the generated images each attribute is
a simple function of the scene (the digit, a second smaller digit, colours, marks along the borders, blur, noise),
listed in ``ATTRIBUTES`` as (official name, what it means here). ``ssm_plugins.mmpretrain.CelebA`` reads this
layout (the official data too).

    python -m ssm_plugins.data.celeba_digits [--out DIR]
"""
from __future__ import annotations

import colorsys
import os
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from ._scenes import DIGIT_NAMES, cli, digit_bank, generated
from .cifar_digits import paste_digit

NAME = "celeba_digits"
WIDTH, HEIGHT = 178, 218
SPLITS = (("train", 240), ("val", 40), ("test", 40))  # partition 0, 1, 2, numbered consecutively as the official
SEED = 40
_LOOP, _PRIME, _SQUARE, _FIBONACCI = {0, 6, 8, 9}, {2, 3, 5, 7}, {0, 1, 4, 9}, {1, 2, 3, 5, 8}

# (official attribute name, its meaning for a generated scene); s: the scene's parameters (see _scene)
ATTRIBUTES = (
    ("5_o_Clock_Shadow", "noisy background"),
    ("Arched_Eyebrows", "the digit has a closed loop (0, 6, 8, 9)"),
    ("Attractive", "the digit is 5 or more"),
    ("Bags_Under_Eyes", "a band across the bottom"),
    ("Bald", "light background"),
    ("Bangs", "a band across the top"),
    ("Big_Lips", "large digit (side >= 60 % of the width)"),
    ("Big_Nose", "the digit is prime (2, 3, 5, 7)"),
    ("Black_Hair", "blue to magenta ink (hue 180-300 deg)"),
    ("Blond_Hair", "yellow to cyan ink (hue 60-180 deg)"),
    ("Blurry", "blurred image"),
    ("Brown_Hair", "red ink (hue 300-60 deg)"),
    ("Bushy_Eyebrows", "the digit is 1, 4 or 7"),
    ("Chubby", "the digit is 0, 3 or 8"),
    ("Double_Chin", "a second, smaller digit"),
    ("Eyeglasses", "a frame around the image"),
    ("Goatee", "a second digit, even"),
    ("Gray_Hair", "greyish ink (low saturation)"),
    ("Heavy_Makeup", "a stripe along the left edge"),
    ("High_Cheekbones", "the digit's centre in the top half"),
    ("Male", "the digit is even"),
    ("Mouth_Slightly_Open", "the digit's centre in the left half"),
    ("Mustache", "a second digit, with a closed loop"),
    ("Narrow_Eyes", "small digit (side < 45 % of the width)"),
    ("No_Beard", "no second digit"),
    ("Oval_Face", "the digit is a square (0, 1, 4, 9)"),
    ("Pale_Skin", "warm background (more red than blue)"),
    ("Pointy_Nose", "the digit is a Fibonacci number (1, 2, 3, 5, 8)"),
    ("Receding_Hairline", "a dot in the top-left corner"),
    ("Rosy_Cheeks", "a dot in the top-right corner"),
    ("Sideburns", "a stripe along the right edge"),
    ("Smiling", "the digit near the centre"),
    ("Straight_Hair", "a dot in the bottom-left corner"),
    ("Wavy_Hair", "a dot in the bottom-right corner"),
    ("Wearing_Earrings", "the digit is a multiple of 3 (0, 3, 6, 9)"),
    ("Wearing_Hat", "a horizontal line through the middle"),
    ("Wearing_Lipstick", "high-contrast ink"),
    ("Wearing_Necklace", "a vertical line through the middle"),
    ("Wearing_Necktie", "the digit is 2 or 3 modulo 4 (2, 3, 6, 7)"),
    ("Young", "the digit is 1 modulo 4 (1, 5, 9)"),
)
ATTRIBUTE_NAMES = tuple(name for name, _ in ATTRIBUTES)
_MARKS = ("noisy", "light", "bottom_band", "top_band", "blur", "second", "frame", "left_stripe", "right_stripe",
          "dot_tl", "dot_tr", "dot_bl", "dot_br", "h_line", "v_line", "grey_ink", "bright_ink")


def attribute_values(s: Dict) -> List[bool]:
    """The 40 attributes (official order) of a scene's parameters ``s``."""
    d, hue, side = s["digit"], s["hue"], s["side"]
    second = s["second"] is not None
    cy, cx = s["centre"]
    return [
        s["noisy"], d in _LOOP, d >= 5, s["bottom_band"], s["light"], s["top_band"], side >= 0.6 * WIDTH, d in _PRIME,
        180 <= hue < 300, 60 <= hue < 180, s["blur"], hue >= 300 or hue < 60, d in {1, 4, 7}, d in {0, 3, 8},
        second, s["frame"], second and s["second"] % 2 == 0, s["grey_ink"], s["left_stripe"], cy < HEIGHT / 2,
        d % 2 == 0, cx < WIDTH / 2, second and s["second"] in _LOOP, side < 0.45 * WIDTH, not second,
        d in _SQUARE, s["warm"], d in _FIBONACCI, s["dot_tl"], s["dot_tr"], s["right_stripe"],
        abs(cy - HEIGHT / 2) < HEIGHT / 6 and abs(cx - WIDTH / 2) < WIDTH / 6, s["dot_bl"], s["dot_br"],
        d % 3 == 0, s["h_line"], s["bright_ink"], s["v_line"], d % 4 in (2, 3), d % 4 == 1,
    ]


def _scene(rng: np.random.Generator) -> Dict:
    s = {mark: bool(rng.random() < 0.4) for mark in _MARKS}
    s["digit"] = int(rng.integers(len(DIGIT_NAMES)))
    s["hue"] = float(rng.uniform(0, 360))
    s["side"] = int(rng.integers(60, 131))
    s["centre"] = (int(rng.integers(s["side"] // 2, HEIGHT - s["side"] // 2)),
                   int(rng.integers(s["side"] // 2, WIDTH - s["side"] // 2)))
    s["second"] = int(rng.integers(len(DIGIT_NAMES))) if s.pop("second") else None
    s["background"] = rng.uniform(*((170, 230) if s["light"] else (20, 80)), size=3)
    s["warm"] = bool(s["background"][0] > s["background"][2])
    return s


def _render(s: Dict, rng: np.random.Generator, glyphs: np.ndarray, by_digit: List[np.ndarray]) -> np.ndarray:
    from PIL import Image, ImageFilter

    image = np.clip(s["background"] + rng.normal(0, 30 if s["noisy"] else 6, size=(HEIGHT, WIDTH, 3)), 0, 255)
    mark = np.array([128.0, 128.0, 128.0]) + (-60 if s["light"] else 60)
    if s["top_band"]:
        image[8:22] = mark
    if s["bottom_band"]:
        image[-22:-8] = mark
    if s["left_stripe"]:
        image[:, 4:14] = mark
    if s["right_stripe"]:
        image[:, -14:-4] = mark
    if s["frame"]:
        image[:3], image[-3:], image[:, :3], image[:, -3:] = mark, mark, mark, mark
    if s["h_line"]:
        image[HEIGHT // 2 - 1:HEIGHT // 2 + 2] = mark
    if s["v_line"]:
        image[:, WIDTH // 2 - 1:WIDTH // 2 + 2] = mark
    for key, (y, x) in (("dot_tl", (26, 20)), ("dot_tr", (26, WIDTH - 30)), ("dot_bl", (HEIGHT - 36, 20)),
                        ("dot_br", (HEIGHT - 36, WIDTH - 30))):
        if s[key]:
            image[y:y + 10, x:x + 10] = mark
    value = (1.0 if s["bright_ink"] else 0.8) if not s["light"] else (0.35 if s["bright_ink"] else 0.15)
    saturation = 0.15 if s["grey_ink"] else 0.9
    ink = np.array(colorsys.hsv_to_rgb(s["hue"] / 360, saturation, value)) * 255
    side, (cy, cx) = s["side"], s["centre"]
    if s["second"] is not None:  # a third of the main digit's size, in the corner farthest from it
        small = side // 3
        y = 30 if cy > HEIGHT / 2 else HEIGHT - 30 - small
        x = 30 if cx > WIDTH / 2 else WIDTH - 30 - small
        paste_digit(image, glyphs[rng.choice(by_digit[s["second"]])], y, x, small, ink)
    paste_digit(image, glyphs[rng.choice(by_digit[s["digit"]])], cy - side // 2, cx - side // 2, side, ink)
    picture = Image.fromarray(image.round().astype(np.uint8))
    return np.asarray(picture.filter(ImageFilter.GaussianBlur(3)) if s["blur"] else picture)


def _write(root: Path) -> None:
    from PIL import Image

    glyphs, targets = digit_bank()
    by_digit = [np.flatnonzero(targets == digit) for digit in range(len(DIGIT_NAMES))]
    rng = np.random.default_rng(SEED)
    (root / "img_align_celeba").mkdir(parents=True)
    attr_rows, partition_rows = [], []
    number = 0
    for partition, (_split, count) in enumerate(SPLITS):
        for _ in range(count):
            number += 1
            name = f"{number:06d}.jpg"
            scene = _scene(rng)
            Image.fromarray(_render(scene, rng, glyphs, by_digit)).save(
                root / "img_align_celeba" / name, format="JPEG", quality=95)
            attr_rows.append(name + " " + " ".join(f"{1 if v else -1:2d}" for v in attribute_values(scene)) + "\n")
            partition_rows.append(f"{name} {partition}\n")
    # as the official file: the count, the names (with a trailing space), then the rows
    (root / "list_attr_celeba.txt").write_text(f"{number}\n" + " ".join(ATTRIBUTE_NAMES) + " \n" + "".join(attr_rows))
    (root / "list_eval_partition.txt").write_text("".join(partition_rows))


def celeba_digits(root: Optional[os.PathLike] = None, overwrite: bool = False) -> Path:
    """Path of the generated data set (``$SSM_PLUGINS_DATA/celeba_digits`` by default), generating it on first use.
    Point a CelebA config at it with ``data_root=<this path>``."""
    return generated(NAME, _write, root, overwrite)


if __name__ == "__main__":
    cli(NAME, celeba_digits)
