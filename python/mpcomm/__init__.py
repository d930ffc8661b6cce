"""mpcomm from Python. ``import mpcomm.torch`` registers the torch.distributed backend "mpcomm"."""

__all__ = ["torch"]
