"""The checkpoint formats, one detector module each (``registry`` orders them).

``dcp`` (PyTorch Distributed Checkpoint), ``deepspeed``, ``hf`` (the Hugging Face Trainer),
``megatron`` (Megatron-LM), ``nemo`` (NeMo and Lightning), ``nvrx`` (nvidia-resiliency-ext
local checkpoints), ``orbax``, ``torch_save`` (single ``torch.save`` files) and ``marker``
(any other layout, complete once a configured marker file is in it). Each implements
``detector.Detector`` and reads the tree only through ``tree``.
"""
