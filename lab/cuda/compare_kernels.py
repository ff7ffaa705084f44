#!/usr/bin/env python3
"""Whether two builds' kernels are the same machine code: for each CUDA object file given twice
(before and after a change), every kernel's sm_90a code (the cubins' .text.<kernel> sections in
the object's fatbin) compared byte for byte, kernels matched by their mangled names with the
anonymous namespace's per-file hash left out. A refactor that claims to move kernels verbatim
shows every kernel of the after-build identical, and the kernels it removes as gone.

  lab/cuda/compare_kernels.py BEFORE_DIR AFTER_DIR [object ...]

BEFORE_DIR and AFTER_DIR are build directories (CMake, ninja); the objects default to the CUDA
backend's kernels.cu.o and fast_linear.cu.o. Needs objcopy (binutils); no GPU, no CUDA tools.
Exit status 1 where a kernel of both builds differs.
"""
import os
import re
import struct
import subprocess
import sys
import tempfile

DEFAULT_OBJECTS = [
    "inference/cuda/CMakeFiles/rote_inference_cuda.dir/kernels.cu.o",
    "inference/cuda/CMakeFiles/rote_inference_cuda.dir/fast_linear.cu.o",
]


def cubins(obj):
    """The ELF images (cubins) inside the object's .nv_fatbin section."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "fatbin")
        subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", obj, out], check=True)
        data = open(out, "rb").read()
    images, at = [], 0
    while (start := data.find(b"\x7fELF", at)) >= 0:
        shoff = struct.unpack_from("<Q", data, start + 0x28)[0]
        shentsize, shnum = struct.unpack_from("<HH", data, start + 0x3A)
        end = start + shoff + shentsize * shnum
        images.append(data[start:end])
        at = end
    return images


def kernel_code(elf):
    """{section name: bytes} of the image's .text.* sections."""
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", elf, shoff + k * shentsize) for k in range(shnum)]
    names_at = headers[shstrndx][4]

    def name(offset):
        tail = elf[names_at + offset:]
        return tail[: tail.index(b"\0")].decode()

    return {name(h[0]): elf[h[4]:h[4] + h[5]] for h in headers if name(h[0]).startswith(".text.")}


def normalized(section):
    return re.sub(r"_GLOBAL__N__[0-9a-f]+_\d+_[A-Za-z0-9_]+?_[0-9a-f]{8}", "ANON", section)


def kernels(obj):
    code = {}
    for image in cubins(obj):
        for section, body in kernel_code(image).items():
            code[normalized(section)] = body
    return code


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    before_dir, after_dir, objects = argv[1], argv[2], argv[3:] or DEFAULT_OBJECTS
    differ = False
    for obj in objects:
        before, after = kernels(os.path.join(before_dir, obj)), kernels(os.path.join(after_dir, obj))
        same = [k for k in before if k in after and before[k] == after[k]]
        changed = [k for k in before if k in after and before[k] != after[k]]
        gone = [k for k in before if k not in after]
        new = [k for k in after if k not in before]
        print(f"{obj}: {len(before)} kernels before, {len(after)} after: {len(same)} identical, "
              f"{len(changed)} different, {len(gone)} gone, {len(new)} new")
        for label, names in (("different", changed), ("gone", gone), ("new", new)):
            for k in names:
                print(f"  {label}: {k[len('.text.'):]}")
        differ = differ or bool(changed)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
