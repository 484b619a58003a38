// An operator as a user writes it outside the repository: the SDK is the
// crate weir, which sourcebuild builds from the SDK weir ships.
#[derive(Default)]
struct Shout;

impl weir::Operator for Shout {
    fn process(&mut self, _port: u32, input: weir::Batch, out: &mut weir::Emitter) -> weir::Result {
        for r in input {
            out.emit_with(0, r.key, r.value.len(), r.timestamp)
                .copy_from_slice(&r.value.to_ascii_uppercase());
        }
        Ok(())
    }
}

weir::operator!(Shout::default());
