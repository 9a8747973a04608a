from .myo import MyoBlock, MyoMixer2d, MyoSSM
from .ssm2d import SSM2D

__all__ = ["SSM2D", "MyoSSM", "MyoBlock", "MyoMixer2d"]
