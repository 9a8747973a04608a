"""SpeechBrain csv files for a wsj0-2mix folder (or the generated stand-in of ``ssm_plugins.data.mixtures``).

    python prepare_data.py --data_folder /yourpath/wsj0-mix/2speakers --save_folder results/save

reads ``<data_folder>/wav8k/min/{tr,cv,tt}/{mix,s1,s2}/*.wav`` (the layout the wsj0-mix scripts write) and
writes ``<save_folder>/wsj_{tr,cv,tt}.csv`` with the columns ID, duration, mix_wav, s1_wav, s2_wav (and their
_format / _opts companions), the files train.py reads. The scan itself lives in ``ssm_plugins.data.mixtures``
so the generated data set and a user's folder go through the same code.
"""
import argparse

from ssm_plugins.data.mixtures import prepare_wsjmix_csv


def prepare_wsjmix(datapath, savepath, n_spks=2, skip_prep=False, fs=8000):
    """SpeechBrain's entry point (same arguments as its WSJ0Mix recipe): csv files for wsj0-2mix (n_spks=2)
    or wsj0-3mix (n_spks=3) at ``fs`` Hz; nothing when ``skip_prep``."""
    if skip_prep:
        return None
    return prepare_wsjmix_csv(datapath, savepath, num_spks=n_spks, sample_rate=fs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_folder", required=True)
    parser.add_argument("--save_folder", required=True)
    parser.add_argument("--num_spks", type=int, default=2)
    parser.add_argument("--sample_rate", type=int, default=8000)
    args = parser.parse_args()
    print(prepare_wsjmix(args.data_folder, args.save_folder, args.num_spks, fs=args.sample_rate))
