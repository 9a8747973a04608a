from . import ssm2d
from . import essm
