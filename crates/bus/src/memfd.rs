//! Same-host transfers in shared memory (issue 19 §1 "Same-host tools may hand values over in
//! shared memory"; seed 003 "Sending a value through inter tool communication", the direct
//! case): when a consumer fetches from an owner listening on a Unix socket, it may ask for the
//! value as a *memfd* — an anonymous in-memory file the owner fills once, seals against any
//! change, and passes over the socket with `SCM_RIGHTS` — instead of PUT chunks.
//!
//! On the wire nothing new: the request is a GET with **window 0** (a window no streaming GET
//! uses), the answer a PUT with offset 0, the value's total size and *no data*, the memfd
//! attached; an owner that cannot (or will not) answers FAIL 2 and the consumer sends a normal
//! GET on the same connection (streaming). Only Unix-socket locations ask.
//!
//! **Read where it lies.** A consumer maps the received memfd read-only ([`map_sealed`]) and
//! decodes its large blobs as slices of the mapping ([`crate::saf::decode_shared`]): the value
//! crosses from owner to consumer with a single copy, the owner's write into the memfd (done
//! once at `put` by an owner that serves same-host consumers, [`sealed_segments`]).
//!
//! `unsafe` in one place, [`map_sealed`]: mapping a file is unsafe because another process
//! could change or shrink it under the mapping; the consumer maps only a memfd whose seals
//! forbid both (checked before mapping), and never writes through the mapping. Everything else
//! is safe code: rustix's `memfd_create`, seals and `sendmsg`/`recvmsg` hand descriptors over
//! as `OwnedFd`.

use std::fs::File;
use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};

use crate::term::Bytes;
use rustix::fs::{fcntl_add_seals, memfd_create, MemfdFlags, SealFlags};
use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// A sealed memfd holding `bytes` (no one can write, grow or shrink it afterwards).
///
/// # Errors
/// The kernel's (no memfd support, out of memory).
pub fn sealed(bytes: &[u8]) -> io::Result<OwnedFd> {
    let fd = memfd_create(
        "viastack-bus-value",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    let mut f = File::from(fd);
    f.write_all(bytes)?;
    let fd = OwnedFd::from(f);
    fcntl_add_seals(
        &fd,
        SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
    )?;
    Ok(fd)
}

/// A sealed memfd holding the concatenation of `segments` (a term stream written once, its
/// large blobs straight from the term, [`crate::saf::encode_segments`]), and the same bytes
/// mapped read-only (for the owner to stream to consumers on other hosts).
///
/// # Errors
/// The kernel's (no memfd support, out of memory).
pub fn sealed_segments(segments: &[crate::saf::Segment]) -> io::Result<(OwnedFd, Bytes)> {
    let fd = memfd_create(
        "viastack-bus-value",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    let mut f = File::from(fd);
    let mut total = 0usize;
    for s in segments {
        let b: &[u8] = match s {
            crate::saf::Segment::Own(v) => v,
            crate::saf::Segment::Blob(b) => b,
        };
        f.write_all(b)?;
        total += b.len();
    }
    let fd = OwnedFd::from(f);
    fcntl_add_seals(
        &fd,
        SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
    )?;
    let bytes = map_at(fd.as_fd(), 0, total, false)?;
    Ok((fd, bytes))
}

/// A mapping kept alive by the bytes sliced from it.
struct Mapped(memmap2::Mmap);

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// The content of a sealed memfd of `total` bytes, mapped read-only (pages filled at once);
/// refused unless its seals forbid writing and shrinking it.
///
/// # Errors
/// Missing seals, a size other than `total`, or the kernel's.
pub fn map_sealed(fd: impl AsFd, total: usize) -> io::Result<Bytes> {
    map_at(fd, 0, total, true)
}

/// [`map_sealed`] of the `total` bytes at `offset` (a stream the owner wrote in place after
/// a header gap, [`shared_blob`]); `populate`: fill the page tables at once.
///
/// # Errors
/// Missing seals, a file shorter than `offset + total`, or the kernel's.
pub fn map_at(fd: impl AsFd, offset: usize, total: usize, populate: bool) -> io::Result<Bytes> {
    let seals = rustix::fs::fcntl_get_seals(&fd)?;
    if !seals.contains(SealFlags::WRITE | SealFlags::SHRINK) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "memfd not sealed against writing and shrinking",
        ));
    }
    let f = File::from(fd.as_fd().try_clone_to_owned()?);
    let size = f.metadata()?.len();
    let end = offset.saturating_add(total);
    if size != end as u64 || total == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("memfd holds {size} bytes, {total} announced at {offset}"),
        ));
    }
    // SAFETY: the memfd is sealed against writes and shrinking (checked above; seals cannot be
    // removed), so no process can change or truncate the mapped bytes while they are mapped;
    // the mapping is read-only and private to this process.
    #[allow(unsafe_code)]
    let map = unsafe {
        let mut o = memmap2::MmapOptions::new();
        o.len(end);
        if populate {
            o.populate();
        }
        o.map(&f)?
    };
    Bytes::from_shared(std::sync::Arc::new(Mapped(map)))
        .slice(offset..end)
        .ok_or_else(|| io::Error::other("mapping shorter than announced"))
}

/// Room left before a [`shared_blob`]'s bytes for the head of the term stream it is put in.
pub const SHARED_HEAD: usize = 4096;

/// A blob made directly in a memfd (`fill` writes its `len` bytes), for a tool that builds a
/// large value to send by reference: `put` then writes only the stream's head in front of it
/// and seals, and a same-host consumer maps it — the value's bytes are never copied between
/// the tools ([`crate::client::Tool::put`]). The memfd is unsealed until then; no one else
/// has it.
///
/// # Errors
/// The kernel's (no memfd support, out of memory).
pub fn shared_blob(len: usize, fill: impl FnOnce(&mut [u8])) -> io::Result<Bytes> {
    let fd = memfd_create(
        "viastack-bus-value",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    let f = File::from(fd);
    f.set_len((SHARED_HEAD + len) as u64)?;
    if len > 0 {
        // SAFETY: the memfd was just made here and no other process or mapping has it, so
        // nothing else can change or truncate it while this writable mapping lives (it is
        // dropped before the memfd is sealed or handed over).
        #[allow(unsafe_code)]
        let mut map = unsafe {
            memmap2::MmapOptions::new()
                .offset(SHARED_HEAD as u64)
                .len(len)
                .map_mut(&f)?
        };
        fill(&mut map);
    }
    // Read-only from now on, in this process too. A private mapping: a shared one counts as
    // writable for the seal (the descriptor is open for writing) and sealing would fail.
    // SAFETY: as above; the only writer afterwards is `put` writing the head in front of
    // these bytes (never into them), and only before sealing.
    #[allow(unsafe_code)]
    let map = unsafe {
        memmap2::MmapOptions::new()
            .len(SHARED_HEAD + len)
            .map_copy_read_only(&f)?
    };
    let whole = Bytes::from_shared(std::sync::Arc::new(Mapped(map))).with_file(
        std::sync::Arc::new(std::sync::Mutex::new(Some(OwnedFd::from(f)))),
    );
    whole
        .slice(SHARED_HEAD..SHARED_HEAD + len)
        .ok_or_else(|| io::Error::other("mapping shorter than made"))
}

/// A shared blob's stream head written in front of its bytes, the memfd sealed: the memfd
/// and the stream's offset in it, or `None` when `blob` is not a shared blob (or was sealed
/// by an earlier put: then the stream is copied as usual).
pub fn seal_in_place(head: &[u8], blob: &Bytes) -> Option<(OwnedFd, usize, Bytes)> {
    use std::os::unix::fs::FileExt;
    let (file, start) = blob.file()?;
    let mut slot = file.lock().ok()?;
    if start != SHARED_HEAD || head.len() > SHARED_HEAD || slot.is_none() {
        return None;
    }
    let fd = slot.take()?;
    let at = SHARED_HEAD - head.len();
    let f = File::from(fd);
    let ok = f.write_all_at(head, at as u64).is_ok();
    let fd = OwnedFd::from(f);
    if !ok
        || fcntl_add_seals(
            &fd,
            SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
        )
        .is_err()
    {
        return None;
    }
    let stream = blob.widen(head.len())?;
    Some((fd, at, stream))
}

/// Sends `frame` (whole) on the Unix socket `sock` with `fd` attached.
///
/// # Errors
/// The socket's error.
pub fn send_with_fd(sock: impl AsFd, frame: &[u8], fd: impl AsFd) -> io::Result<()> {
    let fds = [fd.as_fd()];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    control.push(SendAncillaryMessage::ScmRights(&fds));
    let n = sendmsg(
        &sock,
        &[io::IoSlice::new(frame)],
        &mut control,
        SendFlags::empty(),
    )?;
    if n < frame.len() {
        // The descriptor went with the first bytes; the rest is plain.
        let mut rest = &frame[n..];
        while !rest.is_empty() {
            let m = rustix::net::send(&sock, rest, SendFlags::empty())?;
            rest = &rest[m..];
        }
    }
    Ok(())
}

/// Receives up to `buf.len()` bytes from the Unix socket `sock`, and the descriptor attached
/// to them if any (extra descriptors are closed).
///
/// # Errors
/// The socket's error.
pub fn recv_with_fd(sock: impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let r = recvmsg(
        &sock,
        &mut [io::IoSliceMut::new(buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut got = None;
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = msg {
            for fd in fds {
                if got.is_none() {
                    got = Some(fd);
                }
            }
        }
    }
    Ok((r.bytes, got))
}

/// The whole content of a received memfd, which must be `total` bytes long.
///
/// # Errors
/// A read error, or a size other than `total`.
pub fn read_all(fd: OwnedFd, total: usize) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let f = File::from(fd);
    let size = f.metadata()?.len();
    if size != total as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("memfd holds {size} bytes, {total} announced"),
        ));
    }
    // Read at offsets: the file position is shared with the owner's descriptor.
    let mut out = vec![0u8; total];
    f.read_exact_at(&mut out, 0)?;
    Ok(out)
}
