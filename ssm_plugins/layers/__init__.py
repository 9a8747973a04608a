from .ssm2d import SSM2D
from .essm import ESSM, ESSMBlock

__all__ = ["SSM2D", "ESSM", "ESSMBlock"]
