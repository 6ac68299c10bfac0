"""A small PyTorch/XLA MLP trained for a few steps on made-up data (no downloads): the PyTorch/XLA example xlarun captures.

Run with PJRT_DEVICE=CPU (configs/torch-xla.yaml sets it). PyTorch/XLA traces each step lazily and compiles the
graph at `torch_xla.sync()`: XLA dumps it as module_NNNN.SyncTensorsGraph.<n>.*. The training step (forward, loss,
backward, SGD update) is the largest of those graphs; the evaluation after it is a second, smaller one.
"""

import argparse

import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm


def sync() -> None:
    """Compile and run the pending graph (torch_xla.sync from 2.6; xm.mark_step before)."""
    (torch_xla.sync if hasattr(torch_xla, "sync") else xm.mark_step)()


def make_data(batch: int, features: int, classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(batch, features, generator=generator)
    y = torch.randint(0, classes, (batch,), generator=generator)
    return x, y


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch_xla.device() if hasattr(torch_xla, "device") else xm.xla_device()
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    x, y = (t.to(device) for t in make_data(args.batch, 64, 10))
    for step in range(args.steps):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        sync()  # cut the lazy trace here: one graph per step, compiled once and reused
        print(f"step {step}: loss {loss.item():.4f}")
    with torch.no_grad():  # a second, smaller graph: the evaluation
        accuracy = (model(x).argmax(-1) == y).float().mean()
    sync()
    print(f"accuracy {accuracy.item():.3f}")


if __name__ == "__main__":
    main()
