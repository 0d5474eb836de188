//! The proxy's record layer against RFC 8448 §3 ("Simple 1-RTT Handshake",
//! TLS_AES_128_GCM_SHA256): the application-data and close_notify records of both sides,
//! sealed byte for byte from the trace's traffic secrets and opened back.

use ktls::kernel::{KernelCipher, TlsVersion};
use ktls::record::{alert, content, DirectionKeys, Inbound, RecordLayer};

fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

const CLIENT_AP_SECRET: &str = "9e 40 64 6c e7 9a 7f 9d c0 5a f8 88 9b ce 65 52
                                87 5a fa 0b 06 df 00 87 f7 92 eb b7 c1 75 04 a5";
const SERVER_AP_SECRET: &str = "a1 1a f9 f0 55 31 f8 56 ad 47 11 6b 45 a9 50 32
                                82 04 b4 f4 4b fb 6b 3a 4b 4f 1f 3f cb 63 16 43";
/// {client} send application_data record (sequence 0).
const CLIENT_APP_RECORD: &str = "17 03 03 00 43 a2 3f 70 54 b6 2c 94
    d0 af fa fe 82 28 ba 55 cb ef ac ea 42 f9 14 aa 66 bc ab 3f 2b
    98 19 a8 a5 b4 6b 39 5b d5 4a 9a 20 44 1e 2b 62 97 4e 1f 5a 62
    92 a2 97 70 14 bd 1e 3d ea e6 3a ee bb 21 69 49 15 e4";
/// {server} send application_data record (sequence 1: the NewSessionTicket was 0).
const SERVER_APP_RECORD: &str = "17 03 03 00 43 2e 93 7e 11 ef 4a c7
    40 e5 38 ad 36 00 5f c4 a4 69 32 fc 32 25 d0 5f 82 aa 1b 36 e3
    0e fa f9 7d 90 e6 df fc 60 2d cb 50 1a 59 a8 fc c4 9c 4b f2 e5
    f0 a2 1c 00 47 c2 ab f3 32 54 0d d0 32 e1 67 c2 95 5d";
/// {client} send alert record (close_notify, sequence 1).
const CLIENT_ALERT_RECORD: &str =
    "17 03 03 00 13 c9 87 27 60 65 56 66 b7 4d 7f f1 15 3e fd 6d b6 d0 b0 e3";
/// {server} send alert record (close_notify, sequence 2).
const SERVER_ALERT_RECORD: &str =
    "17 03 03 00 13 b5 8f d6 71 66 eb f5 99 d2 47 20 cf be 7e fa 7a 88 64 a9";

fn payload() -> Vec<u8> {
    (0u8..50).collect()
}

/// The server's record layer at the hand-over: it has written the NewSessionTicket.
fn server() -> RecordLayer {
    let c = KernelCipher::AesGcm128;
    RecordLayer::new(
        TlsVersion::Tls13,
        c,
        DirectionKeys::from_secret(c, &hex(CLIENT_AP_SECRET), 0).unwrap(),
        DirectionKeys::from_secret(c, &hex(SERVER_AP_SECRET), 1).unwrap(),
    )
}

fn client() -> RecordLayer {
    let c = KernelCipher::AesGcm128;
    RecordLayer::new(
        TlsVersion::Tls13,
        c,
        DirectionKeys::from_secret(c, &hex(SERVER_AP_SECRET), 1).unwrap(),
        DirectionKeys::from_secret(c, &hex(CLIENT_AP_SECRET), 0).unwrap(),
    )
}

#[test]
fn seals_the_rfc8448_application_data_and_close_notify_records() {
    let mut client = client();
    let mut out = Vec::new();
    client
        .seal_data(&[&payload()[..]], usize::MAX, &mut out)
        .unwrap();
    assert_eq!(out, hex(CLIENT_APP_RECORD));
    out.clear();
    client.seal_alert(alert::CLOSE_NOTIFY, &mut out).unwrap();
    assert_eq!(out, hex(CLIENT_ALERT_RECORD));

    let mut server = server();
    out.clear();
    server
        .seal_record(content::APPLICATION_DATA, &[&payload()], 0, &mut out)
        .unwrap();
    assert_eq!(out, hex(SERVER_APP_RECORD));
    out.clear();
    server.seal_alert(alert::CLOSE_NOTIFY, &mut out).unwrap();
    assert_eq!(out, hex(SERVER_ALERT_RECORD));
}

#[test]
fn opens_the_rfc8448_client_records_on_the_server() {
    let mut server = server();
    let mut record = hex(CLIENT_APP_RECORD);
    match server.open_record(&mut record).unwrap() {
        Inbound::Data { consumed, plain } => {
            assert_eq!(consumed, 72);
            assert_eq!(&record[plain], &payload()[..]);
        }
        other => panic!("expected data, got {other:?}"),
    }
    let mut close = hex(CLIENT_ALERT_RECORD);
    assert_eq!(
        server.open_record(&mut close).unwrap(),
        Inbound::Closed { consumed: 24 }
    );
    assert_eq!(server.sequences(), (2, 1));
}

#[test]
fn opens_the_rfc8448_server_records_on_the_client() {
    let mut client = client();
    let mut both = hex(SERVER_APP_RECORD);
    both.extend_from_slice(&hex(SERVER_ALERT_RECORD));
    // Half a record is not enough; the whole first one is decrypted in place.
    assert_eq!(
        client.open_record(&mut both[..40]).unwrap(),
        Inbound::Incomplete
    );
    let Inbound::Data { consumed, plain } = client.open_record(&mut both).unwrap() else {
        panic!("expected data");
    };
    assert_eq!(&both[plain], &payload()[..]);
    assert_eq!(
        client.open_record(&mut both[consumed..]).unwrap(),
        Inbound::Closed { consumed: 24 }
    );
}
