from . import ssm2d
