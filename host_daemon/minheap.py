"""A binary min-heap over two parallel arrays (keys, items), for njit code: pending
completions ordered by due time (the daemon), events ordered by time (trace replay)."""
import numba


@numba.njit(nogil=True, cache=False)
def heap_push(keys, items, size, key, item):
    """Push ``(key, item)`` on the binary min-heap in ``keys[:size]``; return the new size."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if keys[parent] <= key:
            break
        keys[i] = keys[parent]
        items[i] = items[parent]
        i = parent
    keys[i] = key
    items[i] = item
    return size + 1


@numba.njit(nogil=True, cache=False)
def heap_pop(keys, items, size):
    """Pop the smallest key; return ``(key, item, new size)``."""
    top_key, top_item = keys[0], items[0]
    size -= 1
    key, item = keys[size], items[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and keys[child + 1] < keys[child]:
            child += 1
        if keys[child] >= key:
            break
        keys[i] = keys[child]
        items[i] = items[child]
        i = child
    keys[i] = key
    items[i] = item
    return top_key, top_item, size
