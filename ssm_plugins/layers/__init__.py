from .ssm2d import SSM2D

__all__ = ["SSM2D"]
