"""Amazon Bedrock through Converse (chat) and InvokeModel (embeddings): request encoding,
reply decoding, AWS error mapping and the backends that run boto3 off the event loop. This
module only re-exports them.
"""

from adapters.backends.bedrock.backend import BedrockBackend
from adapters.backends.bedrock.build import build_bedrock_backend
from adapters.backends.bedrock.converse_reply import (
    ConverseStreamDecoder,
    decode_converse,
    stop_reason_from_converse,
    usage_from_converse,
)
from adapters.backends.bedrock.converse_request import MAX_CACHE_POINTS, encode_converse
from adapters.backends.bedrock.embedding_backend import BedrockEmbeddingBackend
from adapters.backends.bedrock.errors import map_error

__all__ = [
    "MAX_CACHE_POINTS",
    "BedrockBackend",
    "BedrockEmbeddingBackend",
    "ConverseStreamDecoder",
    "build_bedrock_backend",
    "decode_converse",
    "encode_converse",
    "map_error",
    "stop_reason_from_converse",
    "usage_from_converse",
]
