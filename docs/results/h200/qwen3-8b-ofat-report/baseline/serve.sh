#!/bin/sh
exec vllm serve /tmp/gpukit/models/qwen3-8b --load-format dummy
