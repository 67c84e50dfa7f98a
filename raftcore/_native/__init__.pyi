from . import crc32c as crc32c
from . import epoch_cache as epoch_cache
from . import records as records
from . import segment as segment
