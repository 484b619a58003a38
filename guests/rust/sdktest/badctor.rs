//! badctor: an operator whose constructor panics with "badctor: constructor
//! failed", for the conformance suite's TestSDKConstructorFailure: the
//! panic's message must reach the host.

use weir::{Batch, Emitter, Operator, Result};

struct BadCtor;

impl BadCtor {
    fn new(fail: bool) -> Self {
        if fail {
            panic!("badctor: constructor failed");
        }
        BadCtor
    }
}

impl Operator for BadCtor {
    fn process(&mut self, _port: u32, _input: Batch<'_>, _out: &mut Emitter) -> Result {
        Ok(())
    }
}

weir::operator!(BadCtor::new(true));
