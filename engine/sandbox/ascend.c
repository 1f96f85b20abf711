/* LD_PRELOAD for user-mode Linux guests: the destination of every memcpy and memmove is
 * faulted in ascending page order before the copy.
 *
 * glibc copies a large buffer backward when the destination aliases the source modulo
 * 4 KiB, so fresh destination pages fault top-down. The UML guest hands out physical pages
 * in ascending order, so each such page lands one page lower in UML's physmem file than
 * the page above it, and the host can merge no two of them into one mapping: past the
 * host's vm.max_map_count (65530 on Debian) the guest process stalls (docs/sandboxes.md).
 * Touching each destination page with a write of nothing (an atomic OR of 0: safe for an
 * overlapping memmove and for other threads) faults it in ascending order; a page already
 * present costs one locked instruction, a fresh one the fault the copy would take anyway.
 * A piece at a time (PIECE), each touched and then copied: touching a whole copy larger
 * than the run's memory limit first would swap its first pages out before the copy
 * reaches them (a Caffe-faithful fc6 copy under 256M was OOM-killed that way).
 *
 * Built by python -m engine.sandbox build into the UML recipe's folder (engine/sandbox/uml.py).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

#define PAGE 4096UL
#define PIECE (256UL * 1024)

typedef void *(*copy_fn)(void *, const void *, size_t);
typedef void *(*checked_fn)(void *, const void *, size_t, size_t);
static copy_fn real_memcpy, real_memmove;
static checked_fn real_memcpy_chk, real_memmove_chk;

static void ascend(void *dst, size_t n) {
    uintptr_t end = (uintptr_t)dst + n;
    uintptr_t p = (uintptr_t)dst;
    if (n <= PAGE && (p & ~(PAGE - 1)) == ((end - 1) & ~(PAGE - 1)))
        return;  /* one page: no order to keep */
    for (; p < end; p = (p & ~(PAGE - 1)) + PAGE)
        __atomic_fetch_or((volatile unsigned char *)p, 0, __ATOMIC_RELAXED);
}

/* dlsym may itself copy: until the real functions are known, copy byte by byte */
static void *bytes_forward(void *dst, const void *src, size_t n) {
    volatile unsigned char *d = dst;
    const unsigned char *s = src;
    if (d < s) {
        for (size_t i = 0; i < n; i++) d[i] = s[i];
    } else {
        for (size_t i = n; i > 0; i--) d[i - 1] = s[i - 1];
    }
    return dst;
}

__attribute__((constructor)) static void resolve(void) {
    real_memcpy = (copy_fn)dlsym(RTLD_NEXT, "memcpy");
    real_memmove = (copy_fn)dlsym(RTLD_NEXT, "memmove");
    real_memcpy_chk = (checked_fn)dlsym(RTLD_NEXT, "__memcpy_chk");
    real_memmove_chk = (checked_fn)dlsym(RTLD_NEXT, "__memmove_chk");
}

/* Touch and copy PIECE by PIECE, lowest first, where the buffers do not overlap (the
 * result is the same bytes); an overlapping move is touched whole and left to glibc. */
static void *copy_up(void *dst, const void *src, size_t n, copy_fn real) {
    if (!real)
        return bytes_forward(dst, src, n);
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (n <= PIECE || (d < s + n && s < d + n)) {
        if (n) ascend(dst, n);
        return real(dst, src, n);
    }
    for (size_t off = 0; off < n; off += PIECE) {
        size_t len = n - off < PIECE ? n - off : PIECE;
        ascend((char *)dst + off, len);
        real((char *)dst + off, (const char *)src + off, len);
    }
    return dst;
}

void *memcpy(void *dst, const void *src, size_t n) {
    return copy_up(dst, src, n, real_memcpy);
}

void *memmove(void *dst, const void *src, size_t n) {
    return copy_up(dst, src, n, real_memmove);
}

/* _FORTIFY_SOURCE's checked copies: glibc's check first (it aborts on an overflow) */
void *__memcpy_chk(void *dst, const void *src, size_t n, size_t room) {
    if (n > room)
        return real_memcpy_chk(dst, src, n, room);
    return copy_up(dst, src, n, real_memcpy);
}

void *__memmove_chk(void *dst, const void *src, size_t n, size_t room) {
    if (n > room)
        return real_memmove_chk(dst, src, n, room);
    return copy_up(dst, src, n, real_memmove);
}
