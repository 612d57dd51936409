"""The sizes the backbone and the pipeline agree on (``from .shapes import SIZE, GRID, CHANNELS``).

Apart from model.py so that the pipeline's stages need not import the model builder, which
itself runs the pipeline's preprocessing to calibrate the INT8 variant.
"""

SIZE = 160  # the fixed input size: height and width
CHANNELS = (3, 24, 48, 64, 64)
STRIDES = (2, 2, 2, 1)
GRID = SIZE // 8  # feature map side after three stride-2 convolutions
