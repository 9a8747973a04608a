"""Main job on the embedded default data.

At this stage of the project: report what the kernel extension provides, then train a small S6
(selective-scan) classifier over the image rows of scikit-learn's digits for a short time on the CPU and print
top-1 before and after. Later issues extend this into one trained and evaluated model per toolbox.
"""
from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch import nn

import ssm_plugins
from ssm_plugins.data import digits_split
from ssm_plugins.ops import selective_scan


class RowS6Classifier(nn.Module):
    """Image rows as a sequence (8 tokens of 8 pixels) -> one selective-scan layer with a residual ->
    mean pool -> linear head."""

    def __init__(self, dim: int = 32, state: int = 8, classes: int = 10, rows: int = 8, cols: int = 8):
        super().__init__()
        self.embed = nn.Linear(cols, dim)
        self.pos = nn.Parameter(torch.randn(rows, dim) * 0.02)
        self.to_delta = nn.Linear(dim, dim)
        self.to_bc = nn.Linear(dim, 2 * state)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, state + 1, dtype=torch.float32)).repeat(dim, 1))
        self.D = nn.Parameter(torch.ones(dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.embed(images.flatten(1, 2)) + self.pos  # (batch, rows, dim)
        B, C = self.to_bc(x).chunk(2, dim=-1)  # (batch, L, state) each
        y = selective_scan(x.transpose(1, 2), self.to_delta(x).transpose(1, 2), -torch.exp(self.A_log),
                           B.transpose(1, 2), C.transpose(1, 2), self.D, delta_softplus=True)
        return self.head((F.silu(y).transpose(1, 2) + x).mean(1))


@torch.no_grad()
def top1(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    model.eval()
    return (model(images).argmax(-1) == labels).float().mean().item() * 100


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-2)
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    print("ssm_plugins", ssm_plugins.__version__, "backends:", json.dumps(ssm_plugins.backend_info()["ops"]))
    train_x, train_y = digits_split("train")
    test_x, test_y = digits_split("test")
    model = RowS6Classifier()
    before = top1(model, test_x, test_y)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    start = time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        for idx in torch.randperm(len(train_y)).split(args.batch_size):
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch + 1}/{args.epochs}: loss {loss.item():.3f}, test top-1 {top1(model, test_x, test_y):.1f}%")
    after = top1(model, test_x, test_y)
    result = {"model": "row-sequence S6 on digits", "top1_before": round(before, 1), "top1_after": round(after, 1),
              "train_seconds": round(time.perf_counter() - start, 1)}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
