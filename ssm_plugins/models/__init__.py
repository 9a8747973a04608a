from . import myo
from . import ssm2d
