"""``torch.onnx``'s place, so that programs which import it at the top (and export only
behind a flag) run. Export and import of ONNX models are not built yet: this module has no
``export``, and a call to it fails with ``AttributeError`` naming it."""
