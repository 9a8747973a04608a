"""What the MMDetection, MMSegmentation and MMPretrain adapters share (mmengine + timm, no toolbox), laid out as
mmengine and MMDetection lay out theirs:

    ================ ====================================================================================
    module           what
    ================ ====================================================================================
    ``backbones``    ViM2, ViQS, SwinSSM2D, ESSM2D, MyoNet: ``BaseModule`` wrappers of our timm models
    ``optimizers``   ``TimmNoDecayOptimWrapperConstructor``: weight decay 0 where ``no_weight_decay()`` says
    ``hooks``        ``RandomStateHook``: ``--resume`` continues the interrupted run's random streams
    ``runner``       ``CPUDistributedRunner``, ``CPUSyncBatchNorm``: ``--launcher pytorch`` without a GPU
    ``checkpoint``   ``allow_mmengine_checkpoints``: ``torch.load(weights_only=True)`` reads mmengine's files
    ``flops``        mmengine's ``get_model_complexity_info`` counts our ops
    ================ ====================================================================================

Every backbone is built with ``timm.create_model(name, features_only=True, ...)`` (so the architecture exists once,
in ``ssm_plugins.models``):

    ========== ====================================== ==========================================
    class      arch -> timm model                     feature maps (strides 4/8/16/32)
    ========== ====================================== ==========================================
    ViM2       tiny/small/base/large -> vim2_t/s/b/l  the MambaMixer paper's pyramid, D channels
    ViQS       tiny/small/base -> viqs_t/s/b          (ConvT / conv branch / pooling + BatchNorm)
    SwinSSM2D  tiny -> swin_tiny_patch4_window7_224_ssm2d  stage outputs + LayerNorm
    ESSM2D     tiny -> essm_2d_tiny                   stage outputs + LayerNorm
    MyoNet     tiny/small/base -> myonet_*            stage outputs + LayerNorm
    ========== ====================================== ==========================================

``ssm_plugins.mmdet`` / ``ssm_plugins.mmseg`` / ``ssm_plugins.mmpretrain`` register the backbones in their
toolbox's ``MODELS``; the constructor, hook and runner are in mmengine's root registries, so every toolbox's configs
find them (``optim_wrapper.constructor``, ``custom_hooks``, ``runner_type``). Importing this package also lets
``torch.load``'s default ``weights_only=True`` read mmengine's own checkpoints and installs the FLOP counters.
Multi-process training on machines without a GPU: ``mim train ... --launcher pytorch --gpus N --cfg-options
runner_type=CPUDistributedRunner env_cfg.dist_cfg.backend=gloo [sync_bn=torch]``.
"""
from .backbones import BACKBONES, ESSM2D, MyoNet, SwinSSM2D, ViM2, ViQS
from .checkpoint import allow_mmengine_checkpoints
from .flops import install as _install_flop_handles
from .hooks import RandomStateHook
from .optimizers import TimmNoDecayOptimWrapperConstructor, no_weight_decay_parameters
from .runner import CPUDistributedRunner, CPUSyncBatchNorm, convert_cpu_sync_batchnorm

__all__ = ["ViM2", "ViQS", "SwinSSM2D", "ESSM2D", "MyoNet", "BACKBONES", "allow_mmengine_checkpoints",
           "TimmNoDecayOptimWrapperConstructor", "no_weight_decay_parameters", "CPUDistributedRunner",
           "CPUSyncBatchNorm", "convert_cpu_sync_batchnorm", "RandomStateHook"]

allow_mmengine_checkpoints()
_install_flop_handles()  # mmengine's get_model_complexity_info counts our ops (.flops)
