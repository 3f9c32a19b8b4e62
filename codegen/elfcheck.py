"""Checking an ELF object file before LLVM sees it.

LLVM's loader (RuntimeDyld) trusts the object it is given: a symbol name past the end of
its string table, a section past the end of the file or a relocation of a kind it does not
know is a fatal error (``LLVM ERROR``, SIGABRT) or a wild read (SIGSEGV), which no Python
``except`` catches. So an object file from the cache is loaded only once this module has
checked, from the bytes themselves: the ELF header (64-bit, little-endian, relocatable, for
this machine), every section inside the file, the section-name and symbol string tables,
every symbol (name inside its string table, section index valid, value inside its
section), and every relocation (symbol index, offset inside the section it patches, a kind
the loader handles). It also computes the object's defined and undefined global symbols,
which the loader compares with what the process offers.
"""
from __future__ import annotations

import platform
import struct

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")

SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOBITS, SHT_REL = 2, 3, 4, 8, 9
SHN_LORESERVE, SHN_ABS, SHN_COMMON = 0xFF00, 0xFFF1, 0xFFF2
SHF_ALLOC = 0x2

# What the kernels Numba emits hold, and so all a loadable object may hold: anything else
# (thread-local storage, groups, symbol types LLVM's loader has no case for) is refused.
# Section type -> the flag sets it may have (write 0x1, alloc 0x2, exec 0x4, merge 0x10,
# strings 0x20, info-link 0x40, x86-64 large 0x10000000): null, progbits (code, constants,
# data, notes), symtab, strtab, rela, nobits, x86-64 unwind (.eh_frame, which LLVM
# registers with the unwinder: it must be loaded).
_LARGE = 0x10000000
_SECTION_FLAGS = {
    0: {0}, 1: {0, 0x2, 0x3, 0x6, 0x12, 0x32, _LARGE | 0x2, _LARGE | 0x3, _LARGE | 0x6},
    2: {0}, 3: {0}, 4: {0x40}, 8: {0x3, _LARGE | 0x3}, 0x70000001: {0x2},
}
_SYMBOL_BINDS = {0, 1, 2}             # local, global, weak
_SYMBOL_TYPES = {0, 1, 2, 3, 4}       # notype, object, func, section, file
_MAX_COMMON = 1 << 20

# e_machine of this process, and the relocation kinds LLVM's loader handles for it
_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183}
_RELOCATIONS = {
    62: {1, 24},   # R_X86_64_64, R_X86_64_PC64 (the JIT's large code model)
}


class ObjectFileError(Exception):
    """An object file that must not be loaded (corrupt, other target, unknown symbols)."""


def _fail(why: str):
    raise ObjectFileError(f"malformed ELF object: {why}")


def _string(obj: bytes, start: int, end: int, offset: int, what: str) -> str:
    if offset >= end - start:
        _fail(f"{what} name offset {offset} past its string table")
    stop = obj.find(b"\0", start + offset, end)
    if stop < 0:
        _fail(f"{what} name not terminated inside its string table")
    try:
        return obj[start + offset:stop].decode("ascii")
    except UnicodeDecodeError:
        _fail(f"{what} name is not ASCII")


def check(obj: bytes, machine: int | None = None):
    """(defined, undefined) global symbol names of the 64-bit little-endian relocatable
    ELF object `obj`, after checking every structure LLVM's loader reads; raises
    ObjectFileError on anything out of place. Weak undefined symbols (allowed to stay
    unresolved) are not listed as undefined."""
    obj = bytes(obj)
    n = len(obj)
    if n < _EHDR.size:
        _fail("shorter than an ELF header")
    (ident, e_type, e_machine, e_version, _entry, _phoff, shoff, _flags, ehsize, _phentsize,
     phnum, shentsize, shnum, shstrndx) = _EHDR.unpack_from(obj, 0)
    if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1 or ident[6] != 1:
        _fail("not a 64-bit little-endian ELF object")
    if e_type != 1 or e_version != 1 or ehsize != _EHDR.size or phnum != 0:
        _fail("not a relocatable object")
    if machine is None:
        machine = _MACHINES.get(platform.machine().lower())
    if machine is not None and e_machine != machine:
        _fail(f"for machine {e_machine}, not {machine}")
    if shentsize != _SHDR.size or not 0 < shnum < SHN_LORESERVE or shstrndx >= shnum:
        _fail("bad section table header")
    if shoff < _EHDR.size or shoff + shnum * _SHDR.size > n:
        _fail("section table outside the file")
    sections = [_SHDR.unpack_from(obj, shoff + i * _SHDR.size) for i in range(shnum)]
    for i, (_nm, kind, flags, _addr, off, size, link, _info, align, _es) in enumerate(sections):
        if i == 0:
            continue
        if flags not in _SECTION_FLAGS.get(kind, ()):
            _fail(f"section {i} of type {kind:#x}, flags {flags:#x}")
        if kind != SHT_NOBITS and (off > n or size > n - off):
            _fail(f"section {i} outside the file")
        if align & (align - 1) or align > 1 << 16:
            _fail(f"section {i} alignment {align}")
        if link >= shnum:
            _fail(f"section {i} links to section {link} of {shnum}")
        if kind == SHT_STRTAB and (size == 0 or obj[off + size - 1] != 0):
            _fail(f"string table {i} does not end with a NUL")
    names = sections[shstrndx]
    if names[1] != SHT_STRTAB:
        _fail("section names are not a string table")
    for i, sec in enumerate(sections[1:], 1):
        _string(obj, names[4], names[4] + names[5], sec[0], f"section {i}")

    defined, undefined, symtabs = set(), set(), {}
    for i, (_nm, kind, _fl, _addr, off, size, link, info, _al, entsize) in enumerate(sections):
        if kind != SHT_SYMTAB:
            continue
        if entsize != _SYM.size or size % _SYM.size or info > size // _SYM.size:
            _fail(f"symbol table {i} sizes")
        strtab = sections[link]
        if strtab[1] != SHT_STRTAB:
            _fail(f"symbol table {i} names are not in a string table")
        str_start, str_end = strtab[4], strtab[4] + strtab[5]
        count = size // _SYM.size
        kinds = symtabs[i] = [0] * count
        for k in range(1, count):  # entry 0 is the null symbol
            st_name, st_info, _other, shndx, value, st_size = _SYM.unpack_from(
                obj, off + k * _SYM.size)
            name = _string(obj, str_start, str_end, st_name, f"symbol {k}") if st_name else ""
            bind, kind_of = st_info >> 4, st_info & 0xF
            kinds[k] = kind_of
            if bind not in _SYMBOL_BINDS or kind_of not in _SYMBOL_TYPES or _other > 3:
                _fail(f"symbol {name or k} of binding {bind}, type {kind_of}")
            if shndx >= shnum and shndx not in (SHN_ABS, SHN_COMMON):
                _fail(f"symbol {name or k} in section {shndx} of {shnum}")
            if shndx == SHN_COMMON and (st_size > _MAX_COMMON or value & (value - 1)
                                        or value > 4096):
                _fail(f"common symbol {name or k} of size {st_size}, alignment {value}")
            if 0 < shndx < shnum:
                section = sections[shndx]
                if kind_of != 3 and not section[2] & SHF_ALLOC:
                    _fail(f"symbol {name or k} in a section not loaded")
                if section[1] != SHT_NOBITS and (value > section[5]
                                                 or st_size > section[5] - value):
                    _fail(f"symbol {name or k} outside its section")
            if bind not in (1, 2) or not name:  # GLOBAL, WEAK
                continue
            if shndx == 0:
                if bind == 1:
                    undefined.add(name)
            else:
                defined.add(name)

    allowed = _RELOCATIONS.get(e_machine)
    for i, (_nm, kind, _fl, _addr, off, size, link, info, _al, entsize) in enumerate(sections):
        if kind == SHT_REL:
            _fail(f"section {i}: REL relocations (only RELA is produced here)")
        if kind != SHT_RELA:
            continue
        if entsize != _RELA.size or size % _RELA.size:
            _fail(f"relocation section {i} sizes")
        if link not in symtabs or not 0 < info < shnum:
            _fail(f"relocation section {i} links")
        target = sections[info]
        kinds = symtabs[link]
        nsyms = len(kinds)
        for pos in range(off, off + size, _RELA.size):
            r_offset, r_info, _addend = _RELA.unpack_from(obj, pos)
            if not 0 < r_info >> 32 < nsyms:
                _fail(f"relocation in section {i} names symbol {r_info >> 32} of {nsyms}")
            if kinds[r_info >> 32] == 4:  # STT_FILE: LLVM's loader has no case for it
                _fail(f"relocation in section {i} against a file symbol")
            if allowed is not None and r_info & 0xFFFFFFFF not in allowed:
                _fail(f"relocation kind {r_info & 0xFFFFFFFF} in section {i}")
            width = 8 if e_machine == 62 and r_info & 0xFFFFFFFF in (1, 24, 25) else 4
            if target[1] != SHT_NOBITS and (r_offset > target[5]
                                            or target[5] - r_offset < width):
                _fail(f"relocation in section {i} outside the section it patches")
    return sorted(defined), sorted(undefined)
