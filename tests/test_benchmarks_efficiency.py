"""The efficiency benchmarks run at a tiny size and print their tables with the paper's figures beside ours:
benchmarks/essm_diagonal_fft.py (eSSM Fig. 7) and benchmarks/ssm2d_train_time.py (2-D SSM Table 1, train time)."""
from benchmarks import essm_diagonal_fft, ssm2d_train_time


def test_essm_diagonal_fft_prints_both_tables_and_writes_the_plot(capsys, tmp_path):
    png = tmp_path / "fig7.png"
    essm_diagonal_fft.main(["--width", "8", "--length", "12", "--batch", "2", "--repeat", "1", "--plot", str(png)])
    out = capsys.readouterr().out
    for text in ("| Vanilla ", "| Diagonal + FFT ", "20.90k", "8.70k", "| Vanilla / Diagonal ", "74.37x",
                 "22.93x", "| Diagonal / Diagonal + FFT "):
        assert text in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ssm2d_train_time_prints_ours_and_the_papers_ratio(capsys):
    ssm2d_train_time.main(["--batch", "1", "--repeat", "1", "--rows", "ViT", "ViT w/ SSM-r"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ViT")]
    assert len(rows) == 2 and "| 1.00x " in rows[0] and "| 2.66x " in rows[1]
