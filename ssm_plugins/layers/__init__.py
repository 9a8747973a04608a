"""nn.Modules of the papers, built on ssm_plugins.ops (torch only: no timm, so ``import ssm_plugins`` stays light)."""
from .essm import ESSM, ESSMBlock
from .mambamixer import MambaMixerBlock, MixerStack, QSMixerBlock, SelectiveChannelMixer, SelectiveTokenMixer
from .mambamixer import TimeVariateMixerBlock
from .multires_conv import ConvTokenInteraction, MultiResolutionConvGate, SpatialPriorModule
from .switch_of_scans import SwitchOfScans
from .mega import MegaBlock, MovingAverageGatedAttention, MultiHeadEMA, S4ND
from .myo import MyoBlock, MyoMixer2d, MyoSSM
from .ssm2d import SSM2D

__all__ = ["SSM2D", "ESSM", "ESSMBlock", "MyoSSM", "MyoBlock", "MyoMixer2d",
           "SelectiveTokenMixer", "SelectiveChannelMixer", "MambaMixerBlock", "QSMixerBlock", "SwitchOfScans",
           "SpatialPriorModule", "MultiResolutionConvGate", "ConvTokenInteraction", "MixerStack", "TimeVariateMixerBlock",
           "MultiHeadEMA", "S4ND", "MovingAverageGatedAttention", "MegaBlock"]
