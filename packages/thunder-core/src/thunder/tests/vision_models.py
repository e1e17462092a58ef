"""timm and torchvision models for the vision sweep (tests) and ``benchmarks/vision.py``: built from
configs with random weights (``pretrained=False``, ``weights=None``); nothing is downloaded.

timm imports torchvision. The torchvision wheel the registries serve for a torch release may be built
for another torch (a CUDA build) whose C++ operators do not load against the CPU torch; its
``import`` then fails registering fake kernels for ``torchvision::nms``/``qnms``. Classification
models never call those operators: :func:`import_timm` declares their schemas (no kernels, so a
call fails with PyTorch's "no kernel" error) and imports only the Python model code; torchvision's
classification models (``torchvision.models``) are then imported the same way.
"""

from __future__ import annotations

import sys

__all__ = ["import_timm", "MODELS", "TORCHVISION_MODELS", "SMOKE_MODELS", "create", "example_input"]

# name -> (timm model name, create_model keyword arguments, input image size)
MODELS: dict[str, tuple[str, dict, int]] = {
    "resnet18": ("resnet18", {}, 64),
    "mobilenetv2": ("mobilenetv2_050", {}, 64),
    "regnety": ("regnety_002", {}, 64),
    "densenet121": ("densenet121", {}, 64),
    "efficientnet_b0": ("efficientnet_b0", {}, 64),
    "convnext": ("convnext_atto", {}, 64),
    "vit": ("vit_tiny_patch16_224", {"img_size": 64}, 64),
    "maxvit": ("maxvit_nano_rw_256", {"img_size": 64}, 64),
    "levit": ("levit_128s", {"img_size": 64}, 64),
    "efficientformer": ("efficientformer_l1", {}, 224),  # its attention's bias table is for 224 pixels only
}

# name -> (torchvision.models builder or model class, its keyword arguments, input image size); dropout off, so that
# train mode compares with eager (thunder's random stream is not eager's)
TORCHVISION_MODELS: dict[str, tuple[str, dict, int]] = {
    "tv_resnet18": ("resnet18", {}, 64),
    "tv_mobilenet_v2": ("mobilenet_v2", {"dropout": 0.0}, 64),
    "tv_regnet_y_400mf": ("regnet_y_400mf", {}, 64),
    "tv_densenet121": ("densenet121", {}, 64),
    # maxvit_t's configuration without its stochastic depth (maxvit_t() fixes it at 0.2); its attention
    # windows need 224 pixels
    "tv_maxvit_t": (
        "maxvit.MaxVit",
        {
            "input_size": (224, 224),
            "stem_channels": 64,
            "partition_size": 7,
            "block_channels": [64, 128, 256, 512],
            "block_layers": [2, 2, 5, 2],
            "head_dim": 32,
            "stochastic_depth_prob": 0.0,
        },
        224,
    ),
}

# every model, by name: timm's, then torchvision's
MODELS = {**MODELS, **TORCHVISION_MODELS}

# small and quick: the fast test suite and ``benchmarks/vision.py --smoke``
SMOKE_MODELS = ("resnet18", "mobilenetv2")

_schemas = None  # the torchvision operator schemas import_timm declared (kept alive)


def import_timm():
    """``import timm``, declaring torchvision's ``nms``/``qnms`` schemas first when its C++ extension cannot load."""
    try:
        import timm
    except RuntimeError as e:
        if "torchvision::" not in str(e):
            raise
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith(("torchvision.", "timm"))]:
            del sys.modules[name]
        _declare_torchvision_schemas()
        import timm
    return timm


def _declare_torchvision_schemas() -> None:
    global _schemas
    import torch

    if _schemas is None:
        _schemas = torch.library.Library("torchvision", "FRAGMENT")
        for op in ("nms", "qnms"):
            _schemas.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


def create(name: str, *, seed: int = 0):
    """The model ``name`` of :data:`MODELS`, random weights from ``seed``, in float32 and train mode."""
    import torch

    timm = import_timm()
    model_name, kwargs, _ = MODELS[name]
    torch.manual_seed(seed)
    if name in TORCHVISION_MODELS:
        import torchvision.models  # importable once import_timm ran (it imports torchvision)

        if "." in model_name:  # a model class built from its configuration
            module, cls = model_name.rsplit(".", 1)
            return getattr(getattr(torchvision.models, module), cls)(num_classes=10, **kwargs)
        return getattr(torchvision.models, model_name)(weights=None, num_classes=10, **kwargs)
    return timm.create_model(model_name, pretrained=False, num_classes=10, **kwargs)


def example_input(name: str, batch: int = 2, *, seed: int = 1):
    """A random image batch for the model ``name``."""
    import torch

    size = MODELS[name][2]
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, size, size, generator=g)
