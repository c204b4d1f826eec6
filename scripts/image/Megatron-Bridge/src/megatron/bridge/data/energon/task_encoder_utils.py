"""Stand-in: the sample type of Megatron-Bridge's Energon datasets, as `bridge-launch data prepare`
names it in .nv-meta/dataset.yaml (`__module__: megatron.bridge.data.energon.task_encoder_utils`,
`__class__: ChatMLWebdataset`). Copied, cut down, from Megatron-Bridge 067f987
src/megatron/bridge/data/energon/task_encoder_utils.py:213-317 (ChatMLSample, videohandler,
ChatMLWebdataset), without the audio handler; it runs on the image's real megatron-energon and
webdataset."""
import inspect
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import torch
from megatron.energon.epathlib.epath import EPath
from megatron.energon.flavors.base_dataset import Sample
from megatron.energon.flavors.webdataset import DefaultDecoderWebdatasetFactory
from webdataset.autodecode import Decoder, imagehandler

from megatron.bridge.utils.safe_pickle import safe_pickle_loads


@dataclass
class ChatMLSample(Sample):
    """Multi-turn samples with optional media and chat-template tools."""

    conversation: str  # JSON string of GPT-format conversations
    imgs: Optional[List[torch.Tensor]] = None
    videos: Optional[List[List[torch.Tensor]]] = None
    audio: Optional[torch.Tensor] = None
    tools: Optional[List[Dict[str, Any]]] = None


class videohandler:
    """Webdataset decoder handler for video fields stored as pickled frame lists."""

    def __init__(self, imagespec):
        self.extensions = ["jpgs", "mp4s", "videos"]
        self.extensions_mapping = {"jpgs": "jpg", "mp4s": "jpg", "videos": "jpg"}
        self.image_handler = imagehandler(imagespec)

    def __call__(self, key, data):
        extension = re.sub(r".*[.]", "", key).lower()
        if extension not in self.extensions:
            return None
        data = safe_pickle_loads(data)
        key = self.extensions_mapping[extension]
        if extension == "jpgs":
            data = [self.image_handler(key, d) for d in data]
        else:
            data = [[self.image_handler(key, d) for d in video] for video in data]
        return data


class ChatMLWebdataset(DefaultDecoderWebdatasetFactory[ChatMLSample]):
    """Webdataset factory for multi-turn ChatML samples with multimodal support."""

    __sample_type__ = ChatMLSample

    def __init__(self, path: EPath, *, auto_decode: bool = True, image_decode_spec: Optional[str] = None, **kwargs):
        kwargs.pop("decoder", None)
        kwargs.pop("auto_decode", None)
        parent_parameters = inspect.signature(DefaultDecoderWebdatasetFactory.__init__).parameters
        if "decoder" in parent_parameters:
            kwargs["decoder"] = None
        else:
            kwargs["auto_decode"] = False
        super().__init__(path, **kwargs)
        if auto_decode:
            spec = image_decode_spec if image_decode_spec is not None else getattr(self, "image_decode", "torchrgb")
            self._decoder = Decoder([imagehandler(spec), videohandler(spec)])
