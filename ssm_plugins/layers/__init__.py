"""nn.Modules of the papers, built on ssm_plugins.ops (torch only: no timm, so ``import ssm_plugins`` stays light)."""
from .ema import MultiHeadEMA
from .essm import ESSM, ESSMBlock
from .mambamixer import MambaMixerBlock, MixerStack, QSMixerBlock, SelectiveChannelMixer, SelectiveTokenMixer
from .mambamixer import TimeVariateMixerBlock
from .mega import MegaBlock, MovingAverageGatedAttention
from .multires_conv import ConvTokenInteraction, MultiResolutionConvGate, SpatialPriorModule
from .myo import MyoBlock, MyoMixer2d, MyoSSM
from .s4nd import S4ND
from .s5 import S5SSM, S5Block
from .spatial_mixers import SpatialMixerOptions, make_spatial_mixer
from .ssm2d import SSM2D
from .switch_of_scans import SwitchOfScans

__all__ = ["SSM2D", "ESSM", "ESSMBlock", "MyoSSM", "MyoBlock", "MyoMixer2d", "S5SSM", "S5Block",
           "SelectiveTokenMixer", "SelectiveChannelMixer", "MambaMixerBlock", "QSMixerBlock", "SwitchOfScans",
           "SpatialPriorModule", "MultiResolutionConvGate", "ConvTokenInteraction", "MixerStack", "TimeVariateMixerBlock",
           "MultiHeadEMA", "S4ND", "MovingAverageGatedAttention", "MegaBlock", "SpatialMixerOptions",
           "make_spatial_mixer"]
